"""The docs as a newcomer follows them: every runnable block of README.md and docs/*.md is run,
in order, in a fresh copy of the sample data, and what it prints is compared with what the doc
shows, so a stale figure fails here. The rules are in tests/doc_blocks.py and docs/testing.md.

Blocks of one document share a workspace (a later block may read what an earlier one wrote),
so run this file whole rather than one case.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import RUN_LANGS, SKIP_REASONS, blocks, problems, run_command, run_python

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
# What a fresh clone has that the blocks use; the rest of the checkout is not needed.
COPIED = ("sample_data", "tests/fixtures", "benchmarks", "docs")
TIMEOUT_S = 600


def _cases():
    for doc in DOCS:
        for b in blocks(ROOT / doc, doc):
            if b.lang in RUN_LANGS:
                yield pytest.param(b, id=f"{doc}:{b.line}")


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory):
    made: dict[str, Path] = {}

    def get(doc: str) -> Path:
        if doc not in made:
            ws = tmp_path_factory.mktemp(doc.replace("/", "_").replace(".", "_"))
            for rel in COPIED:
                shutil.copytree(ROOT / rel, ws / rel, ignore=shutil.ignore_patterns("__pycache__", "data"))
            # `.venv/bin/...` in a doc means the checkout's environment, made by `make setup`.
            (ws / ".venv").symlink_to(Path(sys.prefix))
            made[doc] = ws
        return made[doc]

    return get


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    # As after `. .venv/bin/activate`: `ailedger` and `python` are the checkout's.
    env.update(PATH=bin_dir + os.pathsep + env.get("PATH", ""), VIRTUAL_ENV=sys.prefix, TZ="UTC",
               PYTHONDONTWRITEBYTECODE="1", NO_COLOR="1")
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.parametrize("block", list(_cases()))
def test_doc_block(block, workspaces):
    """Run one block in its document's workspace (see the module docstring)."""
    assert not problems(block), problems(block)
    if block.skip:
        pytest.skip(f"{block.name}: {SKIP_REASONS[block.skip]}")
    ws = workspaces(block.doc)
    if block.lang == "python":
        failure = run_python(block, ws, sys.executable, _env(), TIMEOUT_S)
        assert failure is None, f"{block.name}:\n{failure}"
        return
    for cmd in block.commands():
        failure = run_command(cmd, ws, _env(), TIMEOUT_S)
        assert failure is None, f"{block.doc} {failure}"


def test_every_block_follows_the_rules():
    """No ```sh blocks, known skip reasons only, a command in every console block (docs/testing.md)."""
    found = [p for doc in DOCS for b in blocks(ROOT / doc, doc) for p in problems(b)]
    assert found == []


def test_the_runner_catches_a_stale_figure(tmp_path):
    """The comparison itself: a changed figure, a missing line and a success shown as an error fail."""
    from tests.doc_blocks import Command, unmatched

    out = ["a 1", "b 2", "c 3", "d 4"]
    assert unmatched(["a 1", "b 2", "...", "d 4"], out) is None
    assert unmatched(["a 1", "c 3"], out) == "a 1\nc 3"  # a line left out without `...`
    assert unmatched(["b 2", "...", "d 5"], out) == "d 5"  # a stale figure
    assert unmatched(["c 3", "...", "a 1"], out) == "a 1"  # out of order
    env = _env()
    assert run_command(Command("echo 'x 1'", 1, ["x 1"]), tmp_path, env, 30) is None
    assert "did not print" in run_command(Command("echo 'x 2'", 1, ["x 1"]), tmp_path, env, 30)
    assert "succeeded" in run_command(Command("echo ok", 1, ["error: no"]), tmp_path, env, 30)
    assert "failed" in run_command(Command("exit 3", 1, []), tmp_path, env, 30)
