"""The `close`, `reopen` and `audit` commands, and the close-aware parts of `report`, `ingest` and `import`."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import click

from . import audit, close, jsonout


def _fail(msg: str) -> NoReturn:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def parse_period(source: str | Path, config_path: str | None, text: str) -> tuple[datetime, datetime]:
    """PERIOD as `diff` takes it (`2026-10`, `START..END`), cut in the config's time zone."""
    from . import api, diff
    from .config import load_config

    tz = load_config(api.find_config(source, config_path)).period.timezone
    return diff.parse_span(text, tz)


def report_doc(source: str, config: str | None, period: str | None, as_of: int | None) -> dict:
    """The report `ailedger report` prints (closed figures for a closed period; see close.report_doc)."""
    from .bundle import BundleError
    from .config import ConfigError
    from .store import StoreError

    try:
        span = parse_period(source, config, period) if period else None
        return close.report_doc(source, config, span=span, as_of=as_of)
    except (ConfigError, BundleError, FileNotFoundError, StoreError, ValueError) as exc:
        _fail(f"--period {period}: {exc}" if period and "give START..END" in str(exc) else str(exc))


def summary_lines(rep: dict) -> list[str]:
    """The summary's lines about versions: data version, closed stamp, late changes, corrections."""
    lines = [] if rep.get("data_version") is None else [f"data version {rep['data_version']}"]
    c = rep.get("closed")
    if c:
        lines.append(f"closed at data version {c['data_version']} on {c['at']} by {c['user'] or 'unknown'}"
                     + (" (gaps accepted)" if c["accept_gaps"] else "") + ": these are the figures sent")
        for e in rep.get("after_close", []):
            lines.append(f"  late change, data version {e['data_version']} ({e['source'] or 'ingest'}): "
                         f"{e['amount']:+,.2f}, posted as corrections at {e['posted_at']}")
    corr = rep.get("corrections") or []
    if corr:
        lines.append(f"corrections posted in this period: {rep['corrections_total']:+,.2f}")
        for r in corr:
            lines.append(f"  {r['closed_period']} (data version {r['data_version']}) {r['owner']}: {r['amount']:+,.2f}")
    return lines


def hook_for(config_src: Path | None, no_late: bool, db: str | Path | None = None, cfg=None) -> close.LateHook:
    """The before-commit hook of an ingest: records its config (`config_src`), refuses or marks
    late data. Refused with --no-late, or when `[close] late = "refuse"` in the ingest's config
    (`cfg`) or in the one beside the store `db`."""
    text = config_src.read_text(encoding="utf-8") if config_src is not None and config_src.is_file() else None
    return close.LateHook(config_text=text, no_late=no_late or close.refuses_late(db, cfg))


def late_lines(db: str | Path, hook: close.LateHook) -> list[str]:
    """What an ingest prints about the closed periods it touched and by how much."""
    if not hook.touched:
        return []
    lines = []
    for e in close.post_effects(db, hook):
        owners = ", ".join(f"{o['owner']} {o['amount']:+,.2f}" for o in e["owners"]) or "no owner's cost moved"
        lines.append(f"closed period {e['period']} touched: {e['amount']:+,.2f} ({owners}); "
                     f"posted as corrections at {e['posted_at']}, the closed figures stay as sent")
    return lines


@click.command("close")
@click.argument("db", type=click.Path(exists=True, dir_okay=False))
@click.argument("period", required=False)
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="TOML config (default: the .toml beside the store).")
@click.option("--accept-gaps", is_flag=True, help="Close although the report names gaps (recorded with the close).")
@click.option("--list", "listing", is_flag=True, help="List the closes, reopened ones too, and the late changes.")
@click.option("--json", "as_json", is_flag=True, help="Print the close (or the list) as JSON.")
def close_cmd(db: str, period: str | None, config: str | None, accept_gaps: bool, listing: bool,
              as_json: bool) -> None:
    """Close PERIOD (2026-10, or START..END as diff takes it): store its report under the current
    data version and rules. Later reports of it return those figures; late data posts as corrections."""
    if listing:
        rows = close.history(db)
        if as_json:
            click.echo(jsonout.dumps(rows, indent=2))
            return
        for r in rows:
            state = (f"reopened {r['reopened_at']} by {r['reopened_by'] or 'unknown'}: {r['why']}"
                     if r["reopened_at"] else "closed")
            click.echo(f"{r['period']:<24} data version {r['data_version']:>4}  {r['closed_at']}  "
                       f"{r['user'] or 'unknown'}  {state}")
        if not rows:
            click.echo("no period closed")
        return
    if period is None:
        _fail("name the PERIOD to close (or --list)")
    try:
        span = parse_period(db, config, period)
        got = close.close_period(db, period, span, config_path=config, accept_gaps=accept_gaps)
    except (close.CloseError, ValueError) as exc:
        _fail(str(exc))
        return
    if as_json:
        click.echo(jsonout.dumps(got.stamp(), indent=2))
        return
    click.echo(f"closed {got.period} ({got.start.isoformat()} .. {got.end.isoformat()}) at data version "
               f"{got.data_version} by {got.user or 'unknown'}" + (f"; gaps accepted: {len(got.gaps)}"
                                                                   if got.accept_gaps and got.gaps else ""))


@click.command("reopen")
@click.argument("db", type=click.Path(exists=True, dir_okay=False))
@click.argument("period")
@click.option("--why", required=True, help="Why the closed period is reopened (kept with the close).")
def reopen_cmd(db: str, period: str, why: str) -> None:
    """Reopen a closed PERIOD (recorded with --why); its report is computed again from the data."""
    try:
        got = close.reopen(db, period, why)
    except (close.CloseError, ValueError) as exc:
        _fail(str(exc))
        return
    click.echo(f"reopened {got.period} (closed at data version {got.data_version}): {why}")


@click.command("audit")
@click.argument("db", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the trail as JSON.")
def audit_cmd(db: str, as_json: bool) -> None:
    """The audit trail: every ingest and import with its data version, time, user, files and hashes,
    and per table the rows inserted, unchanged and replaced (replaced rows are kept)."""
    from .store import StoreError

    try:
        rows = audit.trail(db)
    except StoreError as exc:
        _fail(str(exc))
        return
    if as_json:
        click.echo(jsonout.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"version {r['data_version']}  {r['at']}  {r['user'] or 'unknown'}  {r['source'] or ''}"
                   + ("  (replace)" if r["replace"] else ""))
        for f in r["files"]:
            click.echo(f"  file {f['path']}  sha256 {f['sha256']}  {f['bytes']:,} bytes")
        for t, n in sorted(r["tables"].items()):
            click.echo(f"  {t:<12} {n['inserted']:>10,} inserted {n['unchanged']:>10,} unchanged "
                       f"{n['replaced']:>8,} replaced")


def export_versioned(source: str, config: str | None, write, period: str | None = None):
    """`write(comp, data_version, correction_rows)` for an export read at one data version: a
    closed period's at the version it was closed at (the figures sent), with the FOCUS rows of
    the corrections posted in the period. Returns what `write` returns."""
    import polars as pl

    from . import api

    comp, version = close.pinned_run(source, config, parse_period(source, config, period) if period else None)
    if version is None:
        return write(comp, None, pl.DataFrame())
    p = Path(source)
    rep = {"period": {"start": close.iso(comp.period.start), "end": close.iso(comp.period.end),
                      "currency": comp.period.currency},
           "corrections": close.corrections_in(p, comp.period.start, comp.period.end)}
    extra = close.focus_corrections(rep)
    sent = close.find_closed(p, comp.period.start, comp.period.end)
    if sent is None or sent.data_version == version:
        return write(comp, version, extra)
    with audit.snapshot(p, sent.data_version) as snap:
        return write(api.run(snap, config=comp.config), sent.data_version, extra)
