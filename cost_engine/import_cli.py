"""`ailedger import`, `ailedger collect` and `ailedger export focus`: click commands over the
importers, the NVML collector and the FOCUS exporter.

Registered on the main group in cli.py:

    from .import_cli import collect, export, import_cmd
    main.add_command(import_cmd, name="import")
    main.add_command(collect)
    main.add_command(export)

Each also runs on its own (click.testing.CliRunner().invoke(import_cmd, [...])).
Exit codes: 0 done (a partial import prints how many records were left out); 1 nothing imported
from a non-empty input (the most common reason is named), or `--strict` and some records
unmapped (nothing written either way); 2 bad input or conflicts (nothing written); 3 `collect`
without an NVIDIA driver.
"""

from __future__ import annotations

import re

import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from . import terminal

EXIT_UNMAPPED = 1
EXIT_USAGE = 2
EXIT_NO_DEVICE = 3


def _fail(msg: str, code: int = EXIT_USAGE) -> None:
    terminal.echo(f"error: {msg}", err=True)
    sys.exit(code)


def _load_config(config: str | None, near: str | None):
    from . import api
    from .config import ConfigError, load_config

    try:
        return load_config(api.find_config(near, config) if near else (Path(config) if config else None))
    except ConfigError as exc:
        _fail(str(exc))


def _parse_when(text: str | None, option: str = "--end-at") -> datetime | None:
    if text is None:
        return None
    if text.lower() == "now":
        return datetime.now(timezone.utc)
    from .importers import parse_time

    from .importers.values import epoch_problem, time_problem

    number = float(text) if re.fullmatch(r"\s*[+-]?\d+(\.\d+)?\s*", text) else None
    if number is not None and (why := epoch_problem(int(number) if number.is_integer() else number)) is not None:
        _fail(f"{option} {why}")  # epoch milliseconds: say so rather than reading the year 58,000
    ts = parse_time(text)
    if ts is None or ts.tzinfo is None:
        _fail(f"{option} {text!r}: give an ISO time with an offset (2026-10-07T00:00:00Z), epoch seconds, or 'now'")
    if (why := time_problem(ts)) is not None:
        _fail(f"{option} {why}")
    return ts


# ------------------------------------------------------------------------------------------- import


def _format_names() -> list[str]:
    from .importers import FORMATS

    return sorted(FORMATS)


class _ImportCommand(click.Command):
    """`ailedger import --help` ends with the formats installed (entry-point group ailedger.importers)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from .importers import ENTRY_POINT_GROUP, FORMATS, PLUGIN_ERRORS

        rows = [(name, FORMATS[name].summary) for name in sorted(FORMATS)]
        rows += [(name, f"(cannot be loaded: {why})") for name, why in sorted(PLUGIN_ERRORS.items())]
        with formatter.section(f"Installed formats (entry points {ENTRY_POINT_GROUP})"):
            formatter.write_dl(rows)


@click.command("import", cls=_ImportCommand)
@click.argument("fmt", metavar="FORMAT", type=click.Choice(_format_names(), case_sensitive=False))
@click.argument("files", nargs=-1, required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--into", "into", type=click.Path(file_okay=False), help="Bundle folder to add the rows to (created if missing).")
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB store to ingest the rows into.")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="TOML config (default: ailedger.toml in the folder / beside the store); source_timezone applies.")
@click.option("--end-at", "end_at", help="slurm: where running jobs (End Unknown) end: ISO time or 'now'.")
@click.option("--columns", help="slurm: field order of a header-less export, comma-separated.")
@click.option("--inventory", "inventory", type=click.Path(exists=True, dir_okay=False),
              help="slurm: inventory file with node and index columns mapping cards to gpu_id "
                   "(default: the folder's inventory).")
@click.option("--pool", help="prometheus: pool of the cards seen; writes them as inventory.")
@click.option("--pool-label", help="prometheus: node label (kube_node_labels) naming each node's pool, e.g. "
              "nvidia.com/gpu.product; writes the cards as inventory.")
@click.option("--step", type=float, help="prometheus, vllm: query step in seconds (default: inferred; 60 with --url).")
@click.option("--url", help="prometheus, vllm: pull from this Prometheus server's HTTP API instead of files.")
@click.option("--start", "start", help="with --url: start of the period (ISO time with offset, or epoch seconds).")
@click.option("--end", "end", help="with --url: end of the period (ISO time with offset, epoch seconds, or 'now').")
@click.option("--at", "at", help="prometheus, vllm: scrape time of /metrics samples that carry no timestamp.")
@click.option("--owner", help="vllm, otel, openai: owner key of every row (openai: of results without project_id).")
@click.option("--owner-label", help="prometheus, vllm: label naming the owner instead of the namespace "
              "(a pod label of kube_pod_labels, e.g. team).")
@click.option("--owner-attribute", help="otel: span/resource attribute naming the owner (default service.name).")
@click.option("--owner-by", type=click.Choice(["team_id", "api_key", "user", "end_user", "user_id"]),
              help="litellm: field naming the owner (default team_id, else api_key).")
@click.option("--replace", is_flag=True, help="Let imported records replace stored ones with the same key.")
@click.option("--strict", is_flag=True, help="Exit 1 and write nothing when any input record could not be mapped.")
def import_cmd(fmt: str, files: tuple[str, ...], into: str | None, db: str | None, config: str | None,
               end_at: str | None, columns: str | None, inventory: str | None, pool: str | None,
               pool_label: str | None, step: float | None, url: str | None, start: str | None, end: str | None,
               at: str | None, owner: str | None, owner_label: str | None, owner_attribute: str | None,
               owner_by: str | None, replace: bool, strict: bool) -> None:
    """Import FILE... of FORMAT into a bundle or store, or pull it from Prometheus with --url.

    Prints the rows per table, every input record that could not be mapped with its reason,
    and what was left out on purpose. Nothing imported from a non-empty input is an error
    (exit 1) naming the most common reason.
    """
    from . import store
    from .bundle import BundleError
    from .importers import (
        FORMATS,
        BundleConflict,
        ImportFailed,
        ImportOptions,
        folder_lookup,
        gpu_map_from_inventory,
        import_files,
        read_inventory_file,
        store_lookup,
        write_bundle,
    )

    if bool(into) == bool(db):
        _fail("give exactly one of --into BUNDLE_DIR or --db FILE")
    importer = FORMATS[fmt.lower()]
    if bool(files) == bool(url):
        _fail("give FILE... or --url (a Prometheus server), not both and not neither")
    if url and not hasattr(importer, "queries"):
        pulled = ", ".join(n for n, i in sorted(FORMATS.items()) if hasattr(i, "queries"))
        _fail(f"--url works for formats read from Prometheus ({pulled}), not {fmt}")
    if url and (start is None or end is None):
        _fail("--url needs --start and --end")
    cfg = _load_config(config, into or db)
    gpu_map = None
    inv_path = Path(inventory) if inventory else _folder_inventory(into)
    if inv_path is not None:
        try:
            gpu_map = gpu_map_from_inventory(read_inventory_file(inv_path)) or None
        except Exception as exc:  # a broken inventory file: say which
            _fail(f"{inv_path}: cannot read the inventory: {str(exc).splitlines()[0]}")
    options = ImportOptions(
        end_at=_parse_when(end_at), gpu_map=gpu_map,
        columns=[c.strip() for c in columns.split(",")] if columns else None, pool=pool, owner=owner,
        owner_attribute=owner_attribute, owner_by=owner_by, step_s=step, at=_parse_when(at, "--at"),
        owner_label=owner_label, pool_label=pool_label,
        # what the target holds: stored jobs keep their cards, re-exports continue stored records
        stored=store_lookup(db) if db else folder_lookup(into, cfg),
    )
    try:
        if url:
            from .importers.promapi import import_from_api

            t0, t1 = _parse_when(start, "--start"), _parse_when(end, "--end")
            queries = importer.queries(options)
            terminal.echo(f"{fmt}: {url} from {t0:%Y-%m-%dT%H:%M:%SZ} to {t1:%Y-%m-%dT%H:%M:%SZ}, step {step or 60:g} s")
            for i, q in enumerate(queries, start=1):
                terminal.echo(f"  query {i}: {q}")
            result = import_from_api(fmt.lower(), importer, url, t0, t1, step or 60.0, cfg, options)
        else:
            result = import_files(fmt.lower(), files, cfg, options=options)
            terminal.echo(f"{result.format}: {len(files)} file{'s' if len(files) != 1 else ''}")
    except (ImportFailed, BundleError, ValueError) as exc:
        _fail(str(exc))
        return
    _print_result(result)
    if result.rows() == 0 and result.input_records:
        _fail(f"nothing imported; most common reason: {result.main_reason() or 'no record of a known kind'}",
              EXIT_UNMAPPED)
    if strict and result.unmapped.height:
        _fail(f"{result.unmapped.height} input records could not be mapped and --strict is set: nothing written",
              EXIT_UNMAPPED)
    if into:
        try:
            writes = write_bundle(result, into, cfg, replace=replace)
        except BundleConflict as exc:
            _fail(f"{exc} (nothing was written; use --replace to overwrite)")
            return
        except (ImportFailed, BundleError) as exc:
            _fail(str(exc))
            return
        for w in writes:
            terminal.echo(f"wrote {w.file}: {w.added:,} added, {w.unchanged:,} unchanged, {w.replaced:,} replaced"
                          + (f", {w.superseded:,} continued" if w.superseded else ""))
    else:
        from . import audit, close_cli

        hook = close_cli.hook_for(None, no_late=False, db=db, cfg=cfg)
        try:
            res = store.ingest(db, result.bundle(), replace=replace, source=f"import {fmt} " + " ".join(files),
                               supersede=result.supersede, files=audit.file_hashes(files), before_commit=hook)
        except store.StoreConflict as exc:
            _fail(f"{exc} (nothing was written; use --replace to overwrite)")
            return
        except store.StoreError as exc:
            _fail(str(exc))
            return
        continued = sum(res.superseded.values())
        terminal.echo(f"ingest {res.ingest_id}: {res.total_inserted:,} inserted, {res.total_unchanged:,} unchanged, "
                      f"{res.total_replaced:,} replaced" + (f", {continued:,} continued" if continued else ""))
        for line in close_cli.late_lines(db, hook):  # closed periods this import changed, and by how much
            terminal.echo(line)
    if result.unmapped.height:
        terminal.echo(f"partial import: {result.rows():,} rows imported, {result.unmapped.height:,} input records "
                      "could not be mapped (listed above)")


def _print_result(result) -> None:
    for table, n in result.counts().items():
        terminal.echo(f"  {table:<12} {n:>10,} rows")
    if not result.counts():
        terminal.echo("  (no rows)")
    for what, detail in result.notes:
        terminal.echo(f"note: {terminal.safe(what)}: {terminal.safe(detail)}")
    for why, names in result.ignored:
        terminal.echo(f"ignored on purpose ({terminal.safe(why)}): {', '.join(map(terminal.safe, names))}")
    if result.unmapped.height:
        terminal.echo(f"unmapped ({result.unmapped.height}):")
        for r in map(terminal.safe_tree, result.unmapped.iter_rows(named=True)):  # inert, one line each
            where = f"row {r['row']}" if r["row"] is not None else "-"
            terminal.echo(f"  {r['file']} {where}: {r['reason']}")


def _folder_inventory(into: str | None) -> Path | None:
    if not into:
        return None
    for suffix in (".csv", ".jsonl", ".parquet"):
        p = Path(into) / f"inventory{suffix}"
        if p.is_file():
            return p
    return None


# ------------------------------------------------------------------------------------------- collect


def make_backend():
    """The GPU backend `collect` uses (tests replace it with a fake)."""
    from .collector.backend import NvmlBackend

    return NvmlBackend()


@click.command()
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between samples.")
@click.option("--out", type=click.Path(file_okay=False), help="Bundle folder to append telemetry/events/inventory to.")
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB store to ingest each sample into.")
@click.option("--count", type=click.IntRange(min=1), help="Stop after N samples (default: run until Ctrl-C).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True,
              help="File format with --out.")
@click.option("--rotate-mb", type=float, help="With --out: move a file of this size to rotated/ and start anew.")
@click.option("--pool", help="Pool of this host's cards in the inventory (default: the host name).")
@click.option("--node", help="Host name in the inventory (default: this host's).")
@click.option("--quiet", is_flag=True, help="No line per sample.")
def collect(interval: float, out: str | None, db: str | None, count: int | None, fmt: str,
            rotate_mb: float | None, pool: str | None, node: str | None, quiet: bool) -> None:
    """Sample every GPU and MIG instance through NVML into a bundle folder or a store."""
    from .collector.backend import CollectorError
    from .collector.sampler import BundleWriter, Sampler, StoreWriter, run

    if bool(out) == bool(db):
        _fail("give exactly one of --out DIR or --db FILE")
    try:
        writer = (BundleWriter(out, fmt, int(rotate_mb * 1024 * 1024) if rotate_mb else None) if out
                  else StoreWriter(db))
        sampler = Sampler(make_backend(), interval_s=interval, node=node, pool=pool)
        sampler.open()
    except CollectorError as exc:
        _fail(str(exc), EXIT_NO_DEVICE)
        return
    cards = sum(len(c.instances) or 1 for c in sampler.cards)
    terminal.echo(f"collecting {cards} GPU{'s' if cards != 1 else ''} every {interval:g} s into {out or db}", err=True)

    def echo(batch) -> None:
        for n in batch.notes:
            terminal.echo(f"note: {n}", err=True)
        if not quiet:
            terminal.echo(f"{batch.ts:%Y-%m-%dT%H:%M:%S}Z  {len(batch.telemetry)} telemetry rows, "
                          f"{len(batch.events)} events")

    summary = run(sampler, writer, count=count, on_batch=echo)
    terminal.echo(f"{summary.samples} samples: {summary.telemetry_rows} telemetry rows, {summary.event_rows} events",
                  err=True)


# ------------------------------------------------------------------------------------------- export


@click.group()
def export() -> None:
    """Export allocated costs in standard formats, or a whole store as Parquet (a backup)."""


@export.command("focus")
@click.argument("source", type=click.Path(exists=True))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="FILE.csv or FILE.parquet")
@click.option("--focus-version", "version", type=click.Choice(["1.2", "1.3"]), default="1.2", show_default=True,
              help="1.2: a FOCUS 1.2 dataset (the 1.3 allocation columns kept as x_ columns); "
                   "1.3: a FOCUS 1.3 dataset with the split cost allocation columns.")
@click.option("--region", default=None, help="RegionId of the fleet's cards (default: none, left null).")
@click.option("--region-name", default=None, help="RegionName (default: the RegionId).")
@click.option("--availability-zone", default=None, help="AvailabilityZone of the fleet's cards (default: null).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="TOML config (default: ailedger.toml in the bundle / beside the store).")
@click.option("--period", "period", metavar="PERIOD",
              help="The period (2026-10, or START..END as diff takes it) instead of the config's; a closed one "
                   "is exported as it was sent, with the corrections posted in it (docs/close.md).")
def focus(source: str, out: str, version: str, region: str | None, region_name: str | None,
          availability_zone: str | None, config: str | None, period: str | None) -> None:
    """Write the allocated costs of a bundle or store as a FOCUS 1.2 or 1.3 dataset."""
    from . import api
    from .bundle import BundleError
    from .config import ConfigError
    from .exporters.focus import Location, check, write_focus
    from .report import reconciliation

    if not out.lower().endswith((".csv", ".parquet")):
        _fail("--out must end in .csv or .parquet")
    if region_name and not region:
        _fail("--region-name needs --region")
    import polars as pl

    from .close_cli import export_versioned

    location = Location(region_id=region, region_name=region_name, availability_zone=availability_zone)

    def write(comp, data_version, corrections):
        return comp, corrections, write_focus(comp, out, version=version, location=location,
                                              data_version=data_version, extra=corrections)

    try:
        comp, corrections, frame = export_versioned(source, config, write, period)
    except (ConfigError, BundleError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
        return
    rec = reconciliation(comp)
    total = float(frame.filter(pl.col("ChargeClass").fill_null("") != "Correction")["BilledCost"].sum())
    if corrections.height:  # late changes of closed periods, posted here (docs/close.md)
        terminal.echo(f"corrections: {corrections.height:,} rows (ChargeClass Correction), "
                      f"{float(corrections['BilledCost'].sum()):+,.2f} {comp.period.currency}")
    terminal.echo(f"wrote {out}: FOCUS {version}, {frame.height:,} rows, BilledCost {total:,.2f} "
                  f"{comp.period.currency} (input cost {rec['input_cost']:,.2f})")
    for p in check(frame, version):
        terminal.echo(f"warning: {p}", err=True)
    if abs(total - rec["input_cost"]) > 1e-6 * max(1.0, abs(rec["input_cost"])):
        _fail(f"export sums to {total} but the input cost is {rec['input_cost']}")


__all__ = ["collect", "export", "focus", "import_cmd", "make_backend"]
