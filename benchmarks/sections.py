"""Named sections of benchmarks/RESULTS.md that one script writes and the others keep.

A section is the text between `<!-- section:NAME -->` and `<!-- /section:NAME -->`; run.py
rewrites the whole file but carries over the sections it did not write (the forecast backtest's).
"""

from __future__ import annotations

import re
from pathlib import Path


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- section:{name} -->", f"<!-- /section:{name} -->"


def _pattern(name: str | None = None) -> re.Pattern[str]:
    n = re.escape(name) if name else r"[\w-]+"
    return re.compile(rf"<!-- section:(?P<name>{n}) -->.*?<!-- /section:(?P=name) -->\n?", re.S)


def replace_section(path: Path, name: str, body: str) -> None:
    """Write `body` as section `name` of the file (replacing the old one, else appended)."""
    start, end = _markers(name)
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if _pattern(name).search(text):
        text = _pattern(name).sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block
    path.write_text(text, encoding="utf-8")


def keep_sections(path: Path, new_text: str) -> str:
    """`new_text` followed by the sections of the file at `path` that `new_text` does not have."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    have = {m.group("name") for m in _pattern().finditer(new_text)}
    kept = [m.group(0) for m in _pattern().finditer(old) if m.group("name") not in have]
    if not kept:
        return new_text
    return new_text.rstrip("\n") + "\n\n" + "\n".join(k.rstrip("\n") + "\n" for k in kept)
