"""The `ailedger` command: a thin click front over the engine (no formulas here)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__, api, future, jsonout, terminal
from .config import ConfigError


def _fail(msg: str) -> None:
    terminal.echo(f"error: {msg}", err=True)
    sys.exit(2)


UNATTRIBUTED_SHOWN = 10  # unmapped owner keys listed by the terminal summary
RECONCILIATION_SHOWN = 10  # rows of overlapping token sources listed by the terminal summary


def _money(v) -> str:
    return "unknown" if v is None else f"{v:,.2f}"


def _hours(v) -> str:
    return "unknown" if v is None else f"{v:,.1f}"


def _pct(v) -> str:
    return "unknown" if v is None else f"{100 * v:.1f}%"


class _Commands(click.Group):
    """The command group: a damaged store file, met by any command at any depth (a truncated
    copy, an overwritten block), ends it with one message naming the file and exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        words = list(args)  # the command line, for naming the file of a damage error
        ctx = super().make_context(info_name, args, parent, **extra)
        ctx.meta["ailedger.words"] = words
        return ctx

    def invoke(self, ctx: click.Context):
        words = ctx.meta.get("ailedger.words", [])
        try:
            return super().invoke(ctx)
        except Exception as exc:
            from .store import StoreDamaged
            from .store_files import damaged, is_damage

            if isinstance(exc, StoreDamaged):
                _fail(str(exc))
            if not is_damage(exc):
                raise
            _fail(damaged(_damaged_file(str(exc), words)))


def _damaged_file(message: str, words: list[str]) -> str:
    """The file DuckDB names in its message, else the command's first argument that is a
    DuckDB file (a checksum error names only a block)."""
    import re

    from .store_files import looks_like_duckdb

    named = re.search(r'from file "([^"]+)"', message)
    if named:
        return named.group(1)
    return next((w for w in words if looks_like_duckdb(Path(w))), "(the store named above)")


@click.group(cls=_Commands)
@click.version_option(version=__version__, prog_name="ailedger")
def main() -> None:
    """ailedger: what a tenant, a project or a model really costs."""


def _compute(source: str, config: str | None):
    from .bundle import BundleError

    try:
        return api.run(source, config)
    except (ConfigError, BundleError, FileNotFoundError) as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(str(exc))


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False), help="TOML config (default: ailedger.toml in the bundle, or the .toml beside the store).")
@click.option("--json", "as_json", is_flag=True, help="Print the report object of the data contract.")
@click.option("--top", default=5, show_default=True, help="Rows per ranking in the summary.")
@click.option("--period", "period", metavar="PERIOD",
              help="The period (2026-10, or START..END as diff takes it) instead of the config's; a closed one "
                   "gives its closed figures.")
@click.option("--as-of-version", "as_of", type=click.IntRange(min=1), metavar="V",
              help="A store as it was at data version V (an ingest id; see `ailedger audit`).")
def report(source: str, config: str | None, as_json: bool, top: int, period: str | None, as_of: int | None) -> None:
    """Report on a bundle folder or an ailedger DuckDB store."""
    from .close_cli import report_doc, summary_lines

    rep = report_doc(source, config, period, as_of)
    if as_json:
        _echo_json(rep)
        return
    terminal.echo(render_summary(rep, top))
    for line in summary_lines(rep):  # the data version, a closed period's stamp, its corrections
        terminal.echo(line)


def _echo_json(doc: dict) -> None:
    """Print a JSON document; a NaN or infinite figure is an error naming where it sits."""
    try:
        terminal.echo(jsonout.dumps(doc, indent=2, default=str))
    except jsonout.NonFiniteError as exc:
        _fail(str(exc))


def render_summary(rep: dict, top: int = 5) -> str:
    """A terminal summary: totals, top tenants, idle by cause, reconciliation."""
    # Names from the data and the config pass through terminal.safe: one line each, inert.
    name = terminal.safe
    t, p, cur = rep["totals"], rep["period"], name(rep["period"]["currency"])
    # Figures built on a span no rate or tariff covers say so (report "partial", coverage.py).
    part = {f["figure"] for f in rep.get("partial", []) if f["table"] == "totals"}
    owed = {f["row"]["tenant"] for f in rep.get("partial", []) if f["table"] == "by_tenant" and f["figure"] == "cost"}

    def mark(figure: str) -> str:
        return " (partial)" if figure in part else ""

    lines = [
        f"ailedger report  {p['start']} .. {p['end']}  ({name(p['timezone'])}, {cur})",
        f"boundary: {name(rep['boundary']['name'])} ({', '.join(map(name, rep['boundary']['categories']))})",
        "",
        "GPU-hours    available {:>12}   allocated {:>12}   active {:>12}".format(
            _hours(t["available_gpu_hours"]), _hours(t["allocated_gpu_hours"]), _hours(t["active_gpu_hours"])),
        "             allocation rate {:>7}   idle rate {:>7}   avg util {:>6}   telemetry coverage {:>7}".format(
            _pct(t["allocation_rate"]), _pct(t["idle_rate"]),
            "unknown" if t["avg_util_pct"] is None else f"{t['avg_util_pct']:.1f}%", _pct(t["telemetry_coverage"])),
        f"cost         {_money(t['cost'])} {cur}{mark('cost')}   per GPU-hour {_money(t['cost_per_gpu_hour'])}"
        f"   per allocated GPU-hour {_money(t['cost_per_allocated_gpu_hour'])}",
        f"energy       {_hours(t['energy_kwh_gpu'])} kWh GPU   {_hours(t['energy_kwh_facility'])} kWh facility"
        f"   energy cost {_money(t['energy_cost'])}{mark('energy_cost')}"
        f"   CO2e {_hours(t.get('carbon_kg'))} kg{mark('carbon_kg')}",
        f"tokens       {t['input_tokens']:,} in   {t['cached_input_tokens']:,} cached   {t['output_tokens']:,} out"
        f"   {t['requests']:,} requests   $/1M tokens {_money(t['cost_per_million_tokens'])}",
        "",
        f"top tenants by cost ({cur})",
    ]
    for r in rep["by_tenant"][:top]:
        lines.append(f"  {name(r['tenant']):<24} {_money(r['cost']):>14}   {_hours(r['allocated_gpu_hours']):>10} GPU-h"
                     + (" (partial)" if r["tenant"] in owed else ""))
    lines.append("")
    lines.append("idle by cause")
    for r in rep["idle"]:
        lines.append(f"  {name(r['kind']):<12} {name(r['cause']):<20} {_hours(r['gpu_hours']):>10} GPU-h {_money(r['cost']):>14}")
    rc = rep["reconciliation"]
    lines += [
        "",
        "reconciliation",
        f"  input cost   {_money(rc['input_cost']):>14}",
        f"  attributed   {_money(rc['attributed']):>14}",
        f"  idle         {_money(rc['idle']):>14}",
        f"  unattributed {_money(rc['unattributed']):>14}",
        # A difference that rounds to 0 prints as 0.000000: its sign is float summation order.
        f"  difference   {(0.0 if round(rc['difference'], 6) == 0 else rc['difference']):>14.6f}",
    ]
    if rep["unattributed"]:
        # The costliest few: a gateway log can carry a million unmapped keys (all in --json).
        keys = rep["unattributed"][:UNATTRIBUTED_SHOWN]
        more = len(rep["unattributed"]) - len(keys)
        lines.append("unattributed keys: " + ", ".join(f"{name(u['source'])}:{name(u['key'])} ({_money(u['cost'])})" for u in keys)
                     + (f", and {more:,} more (see --json)" if more > 0 else ""))
    if rep["token_reconciliation"]:
        lines += ["", "token sources counting the same hours (billed, then checks)"]
        for r in rep["token_reconciliation"][:RECONCILIATION_SHOWN]:
            diff = "" if r["difference_tokens"] is None else f"   difference {r['difference_tokens']:+,}"
            lines.append(f"  {r['model']:<24} {r['start']} to {r['end']}  {r['source']:<12} "
                         f"{'billed' if r['billed'] else 'check':<6} {r['tokens']:>14,} tokens "
                         f"({r['output_tokens']:,} out){diff}")
        more = len(rep["token_reconciliation"]) - RECONCILIATION_SHOWN
        if more > 0:
            lines.append(f"  and {more:,} more (see --json)")
    if rep["rejected"]:
        lines.append(f"rejected rows: {len(rep['rejected'])} (see --json)")
    if part:
        lines.append(f"partial figures: {', '.join(sorted(part))} (built on spans without a rate or tariff; "
                     "see the gaps: rate, tariff and carbon coverage)")
    if rep["gaps"]:
        lines.append(f"gaps: {len(rep['gaps'])}: " + "; ".join(name(g["what"]) for g in rep["gaps"][:6]))
    return "\n".join(lines)


@main.command()
@click.argument("bundle", type=click.Path(exists=True, file_okay=False))
@click.option("--db", required=True, type=click.Path(dir_okay=False),
              help="DuckDB store file (created, with its folder, if missing).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="TOML config (default: ailedger.toml in the bundle); copied beside the store (its name with .toml).")
@click.option("--replace", is_flag=True, help="Let records with a known id and new content replace the stored ones.")
@click.option("--rollup", "rollup_dir", type=click.Path(exists=True, file_okay=False),
              help="A rollup folder made by `ailedger rollup` (e.g. on Spark) to store with the bundle.")
@click.option("--no-late", is_flag=True,
              help="Refuse the ingest if it changes a closed period (or set [close] late = \"refuse\"; docs/close.md).")
def ingest(bundle: str, db: str, config: str | None, replace: bool, rollup_dir: str | None, no_late: bool) -> None:
    """Load a bundle folder into a DuckDB store (one transaction, idempotent).

    The store's quarter-hour telemetry rollup is then brought up to date (in its own transaction);
    with --rollup, the given rollup folder is stored instead (a fleet whose raw samples stay elsewhere)."""
    from . import audit, close_cli, store
    from .bundle import BundleError, read_bundle
    from .config import load_config

    # Into a store that exists, a folder may bring only what is new (a late invoice's costs.csv):
    # the store holds the allocations, and its kept config reads the folder when it has none.
    into_store = store.is_store(db)
    cfg_path = api.find_config(bundle, config) or (api.find_config(db, None) if into_store else None)
    try:
        cfg = load_config(cfg_path)
        b = read_bundle(bundle, cfg, require_allocations=not into_store)
    except (ConfigError, BundleError) as exc:
        _fail(str(exc))
    total = sum(f.height for f in b.tables.values())
    with click.progressbar(length=total, label="ingesting", file=sys.stderr) as bar:
        seen: dict[str, int] = {}

        def progress(table: str, done: int, _total: int) -> None:
            bar.update(done - seen.get(table, 0))
            seen[table] = done

        hook = close_cli.hook_for(cfg_path, no_late, db, cfg)
        try:
            result = store.ingest(db, b, replace=replace, progress=progress, source=bundle,
                                  rollup=None if rollup_dir else cfg.activity,
                                  files=audit.file_hashes([bundle]), before_commit=hook)
        except store.StoreConflict as exc:
            _fail(f"{exc} (nothing was written; use --replace to overwrite)")
        except store.StoreError as exc:  # not a store, newer or damaged, disk full: said first
            _fail(str(exc))
    terminal.echo(describe_ingest(result))
    now = future.clock(None)
    for what, detail in future.gaps(future.scan_tables(b.tables, now), now):
        terminal.echo(f"note: {terminal.safe(what)}: {terminal.safe(detail)}")
    for line in close_cli.late_lines(db, hook):
        terminal.echo(line)
    cfg_src = api.find_config(bundle, config)
    if cfg_src is not None:
        # Keep the bundle's config beside the store so `ailedger report FILE` reads the same period.
        terminal.echo(keep_config(Path(cfg_src), Path(db)))
    if rollup_dir:
        from . import quarter_store

        try:
            n = quarter_store.ingest_rollup(db, rollup_dir)
        except (ValueError, store.StoreError) as exc:
            _fail(f"{rollup_dir}: {exc}")
        terminal.echo(f"telemetry rollup: {n:,} card quarter hours stored from {rollup_dir}")
    elif result.rollup_s is not None:
        terminal.echo(f"telemetry rollup refreshed in {result.rollup_s:.1f} s")
    elif result.rollup_error is not None:
        terminal.echo(f"telemetry rollup not refreshed ({result.rollup_error}); reports read raw samples")
    if b.rejected.height:
        terminal.echo(f"{b.rejected.height} rows rejected (kept in the store's rejected table):")
        for r in map(terminal.safe_tree, b.rejected.head(20).iter_rows(named=True)):
            terminal.echo(f"  {r['file'] or r['table']} row {r['row']}: {r['reason']}")


def keep_config(src: Path, db: Path) -> str:
    """Copy the config beside the store (the store's name with .toml), where report and serve look; say so."""
    target = db.with_suffix(".toml")
    text = src.read_text(encoding="utf-8")
    before = target.read_text(encoding="utf-8") if target.is_file() else None
    if before == text:
        return f"config: {target} unchanged (read by report, explain and serve of {db})"
    target.write_text(text, encoding="utf-8")
    verb = "replaced" if before is not None else "wrote"
    return f"config: {verb} {target} from {src} (read by report, explain and serve of {db})"


def describe_ingest(result) -> str:
    """One line per table that had rows: inserted, unchanged, replaced."""
    lines = [f"ingest {result.ingest_id}: {result.total_inserted:,} inserted, {result.total_unchanged:,} unchanged, "
             f"{result.total_replaced:,} replaced"]
    for table, n in result.inserted.items():
        u, r = result.unchanged.get(table, 0), result.replaced.get(table, 0)
        if n or u or r:
            lines.append(f"  {table:<12} {n:>10,} inserted {u:>10,} unchanged {r:>6,} replaced")
    return "\n".join(lines)


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="TOML config (default: ailedger.toml in the bundle, or the .toml beside the store).")
@click.option("--tenant", help="The tenant whose cost to explain.")
@click.option("--project", help="The project whose cost to explain (with --tenant: both must match).")
@click.option("--model", help="The model: the cost of the allocations serving it, before recharge.")
@click.option("--json", "as_json", is_flag=True, help="Print every column of the three lists as JSON.")
@click.option("--limit", default=20, show_default=True, help="Rows shown per list (with --json: of the requests; the other lists are whole).")
def explain(source: str, config: str | None, tenant, project, model, as_json: bool, limit: int) -> None:
    """The raw records behind a tenant's, project's or model's figure."""
    from .lineage import explain as explain_
    from .lineage import unknown_names

    if not (tenant or project or model):
        _fail("name a --tenant, --project or --model")
    comp = _compute(source, config)
    unknown = unknown_names(comp, tenant=tenant, project=project, model=model)
    if unknown:
        _fail("; ".join(unknown))
    ex = explain_(comp, tenant=tenant, project=project, model=model)
    if as_json:
        _echo_json({
            "total_cost": ex.total_cost,
            "allocations": ex.allocations.to_dicts(),
            "costs": ex.costs.to_dicts(),
            "requests": ex.requests.head(limit).to_dicts(),
            "requests_total": ex.requests.height,
        })
        return
    who = " / ".join(terminal.safe(x) for x in (tenant, project, model) if x)
    terminal.echo(f"{who}: cost {ex.total_cost:,.2f}")
    terminal.echo(f"\nallocations ({ex.allocations.height})")
    for r in map(terminal.safe_tree, ex.allocations.head(limit).iter_rows(named=True)):
        terminal.echo(f"  {r['allocation_id']:<16} {r['gpu_id'] or '':<18} {r['allocated_gpu_hours']:>9.2f} GPU-h {r['cost']:>12,.2f}")
    terminal.echo(f"\ncost records ({ex.costs.height})")
    for r in map(terminal.safe_tree, ex.costs.head(limit).iter_rows(named=True)):
        terminal.echo(f"  {r['cost_id']:<24} {r['category']:<14} {r['origin']:<16} {r['cost']:>12,.2f}")
    terminal.echo(f"\nrequests ({ex.requests.height})")
    for r in map(terminal.safe_tree, ex.requests.head(limit).iter_rows(named=True)):
        terminal.echo(f"  {r['request_id']:<20} {r['model']:<20} in {r['input_tokens']:>7} out {r['output_tokens']:>7} {r['status']}")


from .scenario_cli import scenario  # noqa: E402  (a subcommand kept in its own module)

@main.command("rollup")
@click.argument("telemetry", type=str)
@click.argument("out", type=str)
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="Config whose [activity] rule the rollup is made for (default: the default rule).")
@click.option("--master", default=None, help="Run on Apache Spark with this master (local[4], spark://..., yarn).")
def rollup_cmd(telemetry: str, out: str, config: str | None, master: str | None) -> None:
    """Roll telemetry Parquet up per card and UTC quarter hour into a rollup folder OUT.

    On DuckDB by default; with --master on Spark (pyspark), where TELEMETRY and OUT may be object
    storage. Store it with `ailedger ingest BUNDLE --db FILE --rollup OUT`."""
    from . import quarters
    from .config import load_config

    try:
        rule = load_config(Path(config) if config else None).activity
        quarters.check_rule(rule)
    except (ConfigError, ValueError) as exc:
        _fail(str(exc))
    if master is None:
        quarters.duckdb_rollup(telemetry, out, rule)
    else:
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            _fail("--master needs pyspark (pip install pyspark)")
        spark = (SparkSession.builder.master(master).appName("ailedger-rollup")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        try:
            quarters.spark_rollup(spark, telemetry, out, rule)
        finally:
            spark.stop()
    terminal.echo(f"rollup written to {out} (rule {quarters.rule_key(rule)})")


main.add_command(scenario)
from .import_cli import collect, export, import_cmd  # noqa: E402

main.add_command(import_cmd, name="import")
main.add_command(collect)
main.add_command(export)
from .ops_cli import restore, serve  # noqa: E402  (serving and backing up: docs/deploy.md)

main.add_command(serve)
main.add_command(restore)
from .diff_cli import diff_cmd  # noqa: E402  (why the cost changed between two periods)

main.add_command(diff_cmd, name="diff")

from .budget_cli import alerts_cmd, budgets_cmd  # noqa: E402  (budgets, forecasts, alerts: docs/budgets.md)

main.add_command(budgets_cmd)
main.add_command(alerts_cmd)
from .close_cli import audit_cmd, close_cmd, reopen_cmd  # noqa: E402  (month-end close: docs/close.md)

main.add_command(close_cmd)
main.add_command(reopen_cmd)
main.add_command(audit_cmd)
