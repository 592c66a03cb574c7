"""`ailedger serve`, `ailedger export parquet` and `ailedger restore`: the commands that run
ailedger for a team (serve the dashboard, back the store up, restore it). See docs/deploy.md.

Registered on the main group in cli.py; exit codes: 0 done, 2 bad input (nothing written).
"""

from __future__ import annotations

import os
import sys

import click

from . import serve as serving
from . import terminal
from .import_cli import export


def _fail(msg: str) -> None:
    terminal.echo(f"error: {msg}", err=True)
    sys.exit(2)


@click.command()
@click.argument("source", required=False, type=click.Path())
@click.option("--port", default=serving.DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port; 0 lets the system choose a free one (the URL printed says which).")
@click.option("--host", default=serving.DEFAULT_HOST, show_default=True,
              help="Address to listen on; 0.0.0.0 for every interface (with the header access mode only "
                   "together with --trusted-proxy).")
@click.option("--access", "access_file", type=click.Path(dir_okay=False),
              help="Access file: who sees which tenants (docs/access.md); default $AILEDGER_ACCESS, else everyone "
                   "sees everything.")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDR",
              help="Address or network of the reverse proxy (repeatable). With the header access mode, "
                   "requests from any other address are refused; required to listen beyond loopback.")
def serve(source: str | None, port: int, host: str, access_file: str | None, trusted_proxies: tuple[str, ...]) -> None:
    """Serve the dashboard on a DuckDB store or a bundle folder."""
    if source is None:
        terminal.echo(serving.NO_SOURCE_HELP, err=True)
        sys.exit(2)
    try:
        path, kind = serving.check_source(source)
        access = serving.check_access(access_file) if access_file else None
        serving.check_exposure(host, access, trusted_proxies)
        cmd = serving.serve_command(path, port=port, host=host, access_file=access, trusted_proxies=trusted_proxies)
    except serving.ServeError as exc:
        _fail(str(exc))
        return
    who = f", access {access}" if access else (", access $AILEDGER_ACCESS" if cmd.env.get("AILEDGER_ACCESS") else "")
    terminal.echo(f"serving {path} ({kind}{who})", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Become the Streamlit server (same process id, so a service manager's signals reach it).
    os.execve(cmd.argv[0], cmd.argv, cmd.env)


@export.command("parquet")
@click.argument("db", type=click.Path(exists=True, dir_okay=False))
@click.argument("folder", type=click.Path(file_okay=False))
def export_parquet(db: str, folder: str) -> None:
    """Back a store up: every table as Parquet in a new FOLDER (restore with `ailedger restore`)."""
    from .backup import export_parquet as export_

    result = _backup_step(export_, db, folder)
    terminal.echo(f"exported {db} to {result.folder}: " + _describe(result.rows))


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--db", required=True, type=click.Path(dir_okay=False), help="The new store file (must not exist).")
def restore(folder: str, db: str) -> None:
    """A new store from a folder written by `ailedger export parquet`."""
    from .backup import restore_parquet

    result = _backup_step(restore_parquet, folder, db)
    terminal.echo(f"restored {result.db} from {result.folder}: " + _describe(result.rows))


def _backup_step(step, source: str, target: str):
    """Run export_parquet / restore_parquet; a BackupError ends the command with exit code 2."""
    from .backup import BackupError

    try:
        return step(source, target)
    except BackupError as exc:
        _fail(str(exc))


def _describe(rows: dict[str, int]) -> str:
    records = {t: n for t, n in rows.items() if n}
    return f"{len(rows)} tables, " + ", ".join(f"{t} {n:,}" for t, n in records.items())


__all__ = ["export_parquet", "restore", "serve"]
