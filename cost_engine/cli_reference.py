"""docs/cli.md, written from the click commands themselves so the reference cannot drift from the code.

Regenerate with `python -m cost_engine.cli_reference > docs/cli.md`; tests/test_docs_reference.py
fails when the committed page differs from what this prints.
"""

from __future__ import annotations

import inspect
import sys

import click

HEADER = """# Command reference

Generated from the code by `python -m cost_engine.cli_reference > docs/cli.md`; a test fails
when this page and the commands disagree, so edit the commands' help, not this page. Every
command also answers `--help`. Exit codes: 0 done; 1 an import that brought nothing (or
`--strict` with unmapped records); 2 bad input, a conflict or a usage error, with nothing
written (a damaged store file among them: "damaged store FILE: restore from backup",
docs/store.md); 3 `collect` without an NVIDIA driver. Names from the data are printed with
their control characters as visible escapes (`\\x1b`, `\\u2028`), so a name cannot drive the
terminal; `--json` output is escaped by JSON itself.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _commands(cmd: click.Command, ctx: click.Context):
    """(context, command) for the command and every subcommand, depth first, in name order."""
    yield ctx, cmd
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


def _section(ctx: click.Context, cmd: click.Command) -> list[str]:
    path = ctx.command_path
    lines = [f"## `{path}`", ""]
    if cmd.help:
        lines += [inspect.cleandoc(cmd.help), ""]
    lines += ["```text", f"{path} {' '.join(cmd.collect_usage_pieces(ctx))}".rstrip(), "```", ""]
    for p in cmd.params:
        if isinstance(p, click.Argument) and isinstance(p.type, click.Choice):
            lines += [f"{p.make_metavar(ctx)} is one of: {', '.join(f'`{c}`' for c in p.type.choices)}.", ""]
    rows = [rec for p in cmd.params if isinstance(p, click.Option) and (rec := p.get_help_record(ctx)) is not None]
    if rows:
        lines += ["| option | meaning |", "|---|---|"]
        lines += [f"| `{_cell(opts)}` | {_cell(help_)} |" for opts, help_ in rows]
        lines.append("")
    if isinstance(cmd, click.Group):
        subs = ", ".join(f"`{path} {n}`" for n in sorted(cmd.commands))
        lines += [f"Subcommands: {subs}.", ""]
    return lines


def render(main: click.Command, name: str = "ailedger") -> str:
    """The Markdown reference of `main` and all its subcommands."""
    lines = [HEADER]
    for ctx, cmd in _commands(main, click.Context(main, info_name=name)):
        lines += _section(ctx, cmd)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    from .cli import main as cli_main

    sys.stdout.write(render(cli_main))
