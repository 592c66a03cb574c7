"""One door for every line the CLI prints: a control character that came with the data (an
owner key, a model, a file name) is shown as a visible escape, so a name cannot drive the
reader's terminal (OSC 52 clipboard writes, OSC 8 links, colours, cursor moves, a carriage
return that overprints a figure) nor fake a line of the output.

    terminal.safe("acme\\x1b]52;c;...\\x07")  -> 'acme\\\\x1b]52;c;...\\\\x07'   one name, on one line
    terminal.safe_tree(report_dict)          -> the same dict, every text in it made safe
    terminal.echo(text)                      -> click.echo, control characters escaped (line breaks kept)

JSON output needs none of this: `json.dumps` (ASCII by default) writes every control
character as a `\\uXXXX` escape already.
"""

from __future__ import annotations

import re
from typing import Any

import click

# C0 (tab and line feed included), DEL, C1 (ESC's 8-bit twins: CSI \x9b, OSC \x9d), the Unicode
# line and paragraph separators, and the bidi controls (text that reads other than it is).
_OTHERS = "\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_IN_NAME = re.compile(f"[\x00-\x1f{_OTHERS}]")
# In a whole output the program's own line feeds and tabs are layout, not data.
_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHERS}]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(value: Any) -> str:
    """A name as one printable line: every control character (line breaks and tabs too) as
    `\\xNN` / `\\uNNNN`; None as ''."""
    if value is None:
        return ""
    return _IN_NAME.sub(_escape, str(value))


def safe_tree(obj: Any) -> Any:
    """A report dict, list or row with every text in it (keys too) passed through `safe`;
    numbers, dates and None as they are."""
    if isinstance(obj, str):
        return safe(obj)
    if isinstance(obj, dict):
        return {safe_tree(k): safe_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(safe_tree(v) for v in obj)
    return obj


def printable(text: str) -> str:
    """A whole output: control characters escaped as in `safe`, but line feeds and tabs kept."""
    return _IN_TEXT.sub(_escape, text)


def echo(text: Any = "", *, err: bool = False) -> None:
    """click.echo through `printable`: the one way the CLI writes to the terminal."""
    click.echo(printable(str(text)), err=err)
