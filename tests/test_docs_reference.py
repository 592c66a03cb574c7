"""The reference pages cannot drift from the code: docs/cli.md is what the click commands
generate, docs/config.md's annotated ailedger.toml holds every key of the config models with
its default, and docs/data-contract.md lists every column of every table with its type,
whether it is required and its default, with example rows that pass the bundle validation.
"""

from __future__ import annotations

import io
import re
import tomllib
from pathlib import Path

import polars as pl
import pytest
from pydantic import BaseModel

from cost_engine import contract
from cost_engine.bundle import validate_frame
from cost_engine.cli import main
from cost_engine.cli_reference import render
from cost_engine.config import Config, parse_config
from tests.doc_blocks import blocks

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_cli_reference_is_what_the_commands_generate():
    """Regenerate with `python -m cost_engine.cli_reference > docs/cli.md` when this fails."""
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == render(main)


def test_cli_reference_lists_every_command_and_option():
    text = render(main)
    for name in ("report", "ingest", "explain", "import", "export focus", "export parquet", "serve", "restore"):
        assert f"## `ailedger {name}`" in text
    assert "| `--strict` | Exit 1 and write nothing when any input record could not be mapped. |" in text
    assert "FORMAT is one of: `litellm`, `openai`, `otel`, `prometheus`, `slurm`, `vllm`." in text


# ------------------------------------------------------------------------------------ config


def _config_block() -> str:
    found = [b for b in blocks(DOCS / "config.md", "docs/config.md") if b.lang == "toml"]
    assert len(found) == 1, "docs/config.md has one toml block: the annotated ailedger.toml"
    return "\n".join(found[0].body) + "\n"


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted paths of every leaf key of a config model (nested models recursed into)."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        t = field.annotation
        if isinstance(t, type) and issubclass(t, BaseModel):
            keys |= _model_keys(t, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _file_keys(text: str) -> tuple[set[str], set[str]]:
    """(active keys, keys shown commented out as `# key = ...`) of a TOML text, dotted."""
    active: set[str] = set()

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict) and v and not prefix.endswith(("drivers.", "shares.", "currency_rates.")) \
                    and k not in ("drivers", "shares", "currency_rates"):
                walk(v, f"{prefix}{k}.")
            else:
                active.add(prefix + k)

    walk(tomllib.loads(text), "")
    commented: set[str] = set()
    section = ""
    for ln in text.splitlines():
        if m := re.match(r"^\[(\w+)\]", ln):
            section = m.group(1) + "."
        elif m := re.match(r"^# (\w+) = ", ln):
            commented.add(section + m.group(1))
    return active, commented


def test_annotated_config_has_every_key_and_its_default():
    """Every key of cost_engine.config.Config is in the block, active with its default value
    or (a key without a default value) commented out with an example."""
    text = _config_block()
    active, commented = _file_keys(text)
    assert active | commented == _model_keys(Config)
    assert not active & commented
    assert parse_config(tomllib.loads(text)) == Config()  # every active line is the default
    for key in commented:  # no default: None in the model
        obj = Config()
        for part in key.split("."):
            obj = getattr(obj, part)
        assert obj is None, key


def test_annotated_config_examples_are_valid():
    """Each commented-out example, uncommented, is a valid value for its key."""
    text = _config_block()
    section = ""
    for ln in text.splitlines():
        if m := re.match(r"^\[(\w+)\]", ln):
            section = m.group(1)
        elif ln.startswith("# ") and re.match(r"^# (\w+) = ", ln):
            line = ln[2:].split("#")[0]
            extra = 'name = "custom"\n' if line.startswith("categories") else ""
            parse_config(tomllib.loads(f"[{section}]\n{extra}{line}\n"))


# ------------------------------------------------------------------------------ data contract

TYPES = {contract.STR: "string", contract.F64: "number", contract.I64: "integer", contract.TS: "timestamp"}


def _sections() -> dict[str, str]:
    """docs/data-contract.md by `## ` heading: a table's section under its name ("## inventory: ...")."""
    text = (DOCS / "data-contract.md").read_text(encoding="utf-8")
    out = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        out[heading.split(":")[0]] = body
    return out


def _contract_sections() -> dict[str, str]:
    return {k: v for k, v in _sections().items() if k in contract.TABLES or re.fullmatch(r"[a-z_]+", k)}


def _rows(section: str) -> list[list[str]]:
    lines = [ln for ln in section.splitlines() if ln.startswith("| `")]
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    return [r for r in rows if len(r) == 6] or rows


def test_every_table_is_documented():
    assert set(_contract_sections()) == set(contract.TABLES)


@pytest.mark.parametrize("table", list(contract.TABLES))
def test_columns_match_the_contract(table):
    """Name, type, required and default of each column, in the contract's order."""
    got = [(r[0].strip("`"), r[1], r[2], r[3].strip("`")) for r in _rows(_contract_sections()[table])]
    want = [(c.name, TYPES[c.dtype], "yes" if c.required else "no", "" if c.default is None else str(c.default))
            for c in contract.TABLES[table]]
    assert got == want


@pytest.mark.parametrize("table", list(contract.TABLES))
def test_example_rows_pass_validation(table):
    """Each table's example rows are read as CSV and validated as a bundle file would be."""
    found = [b for b in blocks(DOCS / "data-contract.md", "docs/data-contract.md")
             if b.lang == "csv" and b.options.get("table") == table]
    assert len(found) == 1
    raw = pl.read_csv(io.StringIO("\n".join(found[0].body) + "\n"), infer_schema=False)
    valid, rejected = validate_frame(table, raw, Config(), f"{table}.csv")
    assert rejected.height == 0, rejected.to_dicts()
    assert valid.height == raw.height >= 1


def test_report_sections_and_totals_are_documented(rep):
    """The report object's sections and every key of totals appear in the report tables."""
    section = _sections()["The report"]
    names = {n for r in _rows(section) for n in re.findall(r"`(\w+)`", r[0])}
    assert set(rep) <= names
    assert set(rep["totals"]) <= names
