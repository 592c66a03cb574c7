"""The `scenario` command: price a scenario TOML's options, with optional sensitivity sweeps and break-evens."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import click

from . import jsonout, terminal
from . import scenario as sc_lib


def _parse_sweep(spec: str, scenario: sc_lib.Scenario) -> tuple[str, list[float]]:
    param, _, raw = spec.partition("=")
    param = param.strip()
    if param not in sc_lib.SWEEP_PARAMETERS:
        raise click.BadParameter(
            f"unknown parameter {param!r}; known: {', '.join(sc_lib.SWEEP_PARAMETERS)}", param_hint="--sweep"
        )
    if not raw.strip():
        return param, sc_lib.default_sweep_values(scenario, param)
    try:
        values = [float(v) for v in raw.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{spec!r}: values must be numbers, e.g. {param}=0.3,0.5,0.7", param_hint="--sweep")
    if not values:
        raise click.BadParameter(f"{spec!r}: no values", param_hint="--sweep")
    return param, values


def _parse_pair(spec: str) -> tuple[str, str]:
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"{spec!r}: give two option names, e.g. cloud-api,owned-new", param_hint="--break-even")
    return parts[0], parts[1]


def _num(v: float | None, digits: int = 2, money: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if money:
        return f"{v:,.0f}"
    if abs(v) >= 1e6:
        return f"{v:.3g}"
    return f"{v:,.{digits}f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """Plain-text table: the first ``left`` columns left-aligned, the rest right-aligned; every cell
    through terminal.safe (option names come from the scenario file)."""
    headers = [terminal.safe(h) for h in headers]
    rows = [[terminal.safe(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def _text_report(
    scenario: sc_lib.Scenario,
    results: list[sc_lib.OptionResult],
    sweeps: list[tuple[str, Any]],
    evens: list[sc_lib.BreakEven],
) -> str:
    w = sc_lib.workload_summary(scenario)
    cur = terminal.safe(scenario.currency)
    out = [
        f"Scenario {terminal.safe(scenario.name)} ({cur}), {w['months']}-month horizon",
        f"Workload: {w['tokens_per_month']:.4g} tokens/month (input {w['input_tokens_per_month']:.4g}, "
        f"cached {w['cached_input_tokens_per_month']:.4g}, output {w['output_tokens_per_month']:.4g}); "
        f"output {w['avg_output_tokens_per_s']:,.0f} tokens/s average, {w['peak_output_tokens_per_s']:,.0f} peak "
        f"({w['peak_to_average']:.2f}x); growth {w['growth_per_month']:.1%}/month; "
        f"acceptance {w['acceptance_rate']:.0%}",
        "",
    ]
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                r.kind,
                r.variant or "",
                _num(r.monthly_cost, money=True),
                _num(r.cost_per_million_tokens, 4),
                _num(r.cost_per_million_input_tokens, 4),
                _num(r.cost_per_million_output_tokens, 4),
                _num(r.cost_per_million_useful_tokens, 4),
                _num(r.cards, 1),
                _num(r.cards_for_peak, 1),
                "-" if r.utilization is None else f"{r.utilization:.1%}",
                _num(r.energy_kwh_facility, 0),
                _num(r.output_tokens_per_joule_gpu, 2),
                _num(r.output_tokens_per_joule_facility, 2),
                _num(r.upfront_capex, money=True),
                _num(r.horizon_cost, money=True),
                _num(r.horizon_cash, money=True),
            ]
        )
    out.append(
        _table(
            [
                "option",
                "kind",
                "variant",
                f"{cur}/month",
                "$/1M",
                "$/1M in",
                "$/1M out",
                "$/1M useful",
                "cards",
                "peak cards",
                "util",
                "kWh fac",
                "tok/J GPU",
                "tok/J fac",
                "capex",
                "horizon cost",
                "horizon cash",
            ],
            rows,
            left=3,
        )
    )
    out += ["", "Monthly cost by category"]
    out.append(
        _table(
            ["option", *sc_lib.CATEGORIES, "total"],
            [[r.name, *(_num(r.breakdown[c], money=True) for c in sc_lib.CATEGORIES), _num(r.monthly_cost, money=True)] for r in results],
        )
    )
    notes = [(terminal.safe(r.name), terminal.safe(n)) for r in results for n in r.notes]
    if notes:
        out += ["", "Notes"] + [f"  {name}: {n}" for name, n in notes]
    for param, df in sweeps:
        values = sorted(set(df["value"].to_list()))
        out += ["", f"Sweep {param} ({sc_lib.SWEEP_PARAMETERS[param]}): $ per 1M tokens / monthly cost"]
        srows = []
        for name in [r.name for r in results]:
            cells = [name]
            for v in values:
                row = df.filter((df["option"] == name) & (df["value"] == v)).row(0, named=True)
                cells.append(f"{_num(row['cost_per_million_tokens'], 4)} / {_num(row['monthly_cost'], money=True)}")
            srows.append(cells)
        out.append(_table(["option", *(f"{v:g}" for v in values)], srows))
    for be in (e.model_copy(update=terminal.safe_tree(e.model_dump())) for e in evens):  # names inert
        out += ["", f"Break-even {be.a} vs {be.b}"]
        if be.volume_tokens is not None:
            eq = "costs swap at a card step" if be.at_card_step else "equal monthly cost"
            out.append(
                f"  volume: {be.volume_tokens:.4g} tokens/month ({be.volume_scale:.3g}x the scenario; "
                f"{be.volume_output_tokens:.4g} output): {eq}, {be.a} {_num(be.monthly_cost_a, money=True)} vs "
                f"{be.b} {_num(be.monthly_cost_b, money=True)}; {be.cheaper_below} cheaper below, "
                f"{be.cheaper_above} above"
            )
        else:
            out.append(f"  volume: none ({be.volume_reason})")
        if be.month is not None:
            out.append(
                f"  month: {be.month} (cumulative cash {be.a} {_num(be.cumulative_a, money=True)} vs "
                f"{be.b} {_num(be.cumulative_b, money=True)}; {be.cheaper_before} cheaper before, "
                f"{be.cheaper_after or 'neither'} after)"
            )
        else:
            out.append(f"  month: none ({be.month_reason})")
    return "\n".join(out)


@click.command("scenario")
@click.argument("file", metavar="FILE.toml", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="PARAM=v1,v2,...",
    help=f"Sensitivity sweep (repeatable); PARAM alone uses default values. PARAM: {', '.join(sc_lib.SWEEP_PARAMETERS)}.",
)
@click.option("--break-even", "pairs", multiple=True, metavar="A,B", help="Break-even of two options (repeatable).")
@click.option("--calibrate", "calibrate_from", type=click.Path(exists=True, path_type=Path), metavar="SOURCE",
              help="Fill throughput, utilization, power, prices and volumes from a bundle or store's measured figures.")
def scenario(file: Path, as_json: bool, sweeps: tuple[str, ...], pairs: tuple[str, ...],
             calibrate_from: Path | None = None) -> None:
    """Compare a workload's cost as a hosted API, rented, owned (new/secondary) or hybrid option."""
    try:
        sc = sc_lib.load_scenario(file)
    except sc_lib.ScenarioError as exc:
        raise click.ClickException(terminal.printable(str(exc))) from None
    provenance: dict[str, str] = {}
    if calibrate_from is not None:
        from .api import run
        from .calibration import calibrate_from_report
        from .report import build_report

        sc, rows = calibrate_from_report(sc, build_report(run(calibrate_from)))
        provenance = {r["field"]: f"{r['measured']} = {r['value']:.6g} <- {r['source']}" for r in rows}
    sweep_specs = [_parse_sweep(s, sc) for s in sweeps]
    pair_specs = [_parse_pair(p) for p in pairs]
    try:
        results = sc_lib.evaluate(sc)
        sweep_frames = [(p, sc_lib.sweep(sc, p, vals)) for p, vals in sweep_specs]
        evens = [sc_lib.break_even(sc, a, b) for a, b in pair_specs]
    except sc_lib.ScenarioError as exc:
        raise click.ClickException(terminal.printable(str(exc))) from None
    if as_json:
        doc = {
            "scenario": sc.name,
            "currency": sc.currency,
            "workload": sc_lib.workload_summary(sc),
            "options": [r.model_dump(mode="json") for r in results],
            "sweeps": [{"parameter": p, "rows": df.to_dicts()} for p, df in sweep_frames],
            "break_even": [be.model_dump(mode="json") for be in evens],
            "calibrated": provenance,
        }
        try:
            terminal.echo(jsonout.dumps(doc, indent=2))
        except jsonout.NonFiniteError as exc:
            raise click.ClickException(terminal.printable(str(exc))) from None
    else:
        if provenance:
            terminal.echo("calibrated from " + str(calibrate_from) + ":")
            for field, line in provenance.items():
                terminal.echo(f"  {field}: {line}")
            terminal.echo("")
        terminal.echo(_text_report(sc, results, sweep_frames, evens))


if __name__ == "__main__":  # pragma: no cover
    scenario()
