#!/usr/bin/env python3
"""How the report grows with each dimension of a big sparse fleet (issue 15): time and peak RSS at 3 sizes per dimension.

    python benchmarks/growth.py [--dims cards,allocations,waits,events,cost_rows,days,requests,owners]
        [--repeat 3] [--out benchmarks/RESULTS.md] [--json FILE] [--scale 1.0]

The base bundle is the sparse shape of sample_data/sparse.py (8,192 cards in 4 pools, 45 days,
~30,000 allocations, 30,000 queue waits, 5,000 events, cost rows per pool per day, no
telemetry). For each dimension the base is generated at half, once and twice its size with
every other dimension held, and `ailedger report` runs from the bundle folder in a fresh
process per run (benchmarks/run.py's harness: the child times itself, the parent reads its
peak RSS). The growth exponent of a dimension is the slope of log(time) and of log(peak RSS)
against log(size), fitted over the three sizes: 1 means linear, 2 quadratic. Both include a
fixed part (starting Python, reading the small tables), which pulls an exponent below 1, so
the table also gives the ratio of the largest size to the middle one (2 for linear growth).

Without --out nothing is written but the table on stdout; with --out the "Sparse fleets"
section of that file is replaced (the rest of the file is kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import run as harness  # noqa: E402  (benchmarks/run.py: subprocess workers with an RSS watchdog)

from sample_data.sparse import generate_sparse  # noqa: E402

BASE = dict(gpus=8192, days=45, allocations=30_000, waits=30_000, events=5_000, cost_span_hours=24.0, owners=200,
            requests=0)
# Dimension -> (generator argument, value at factor 1, how a factor applies). Requests and owners
# have bases of their own (the sparse base has no requests).
DIMS = {
    "cards": ("gpus", 8192, "mul"),
    "allocations": ("allocations", 30_000, "mul"),
    "waits": ("waits", 30_000, "mul"),
    "events": ("events", 5_000, "mul"),
    "cost_rows": ("cost_span_hours", 24.0, "div"),  # half the span = twice the cost rows
    "days": ("days", 45, "mul"),
    "requests": ("requests", 500_000, "mul"),
    "owners": ("owners", 20_000, "mul"),
}
EXTRA = {"requests": dict(owners=2_000), "owners": dict(requests=500_000)}
FACTORS = (0.5, 1.0, 2.0)
SECTION_START, SECTION_END = "<!-- growth:start -->", "<!-- growth:end -->"
TARGET_EXPONENT = 1.15
TARGET_BASE_S = 20.0
TARGET_BASE_MB = 2048.0


def params(dim: str, factor: float) -> dict:
    arg, base, how = DIMS[dim]
    p = dict(BASE, **EXTRA.get(dim, {}))
    value = base * factor if how == "mul" else base / factor
    p[arg] = int(round(value)) if isinstance(base, int) else value
    return p


def bundle_for(data: Path, p: dict) -> Path:
    name = "sparse-" + "-".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}" for k, v in sorted(p.items()))
    path = data / name
    if not (path / "ailedger.toml").is_file():
        generate_sparse(path, **p)
    return path


def size_of(dim: str, p: dict, path: Path) -> float:
    """The size the exponent is fitted against: the rows of the dimension's table (cards,
    allocation rows, ...), or the days."""
    table = {"cards": "inventory", "allocations": "allocations", "waits": "queue", "events": "events",
             "cost_rows": "costs", "requests": "requests"}.get(dim)
    if table:
        with open(path / f"{table}.csv", "rb") as fh:
            return float(sum(1 for _ in fh) - 1)
    return float(p["days"] if dim == "days" else p["owners"])


def slope(xs: list[float], ys: list[float]) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def measure(dims: list[str], repeat: int, data: Path, cap_mb: float, timeout: float, log) -> list[dict]:
    out = []
    for dim in dims:
        points = []
        for f in FACTORS:
            p = params(dim, f)
            path = bundle_for(data, p)
            runs = [harness.run_worker("report_bundle", path, Path(""), cap_mb, timeout) for _ in range(repeat)]
            ok = [r for r in runs if "error" not in r]
            err = next((r["error"] for r in runs if "error" in r), None)
            pt = {"factor": f, "size": size_of(dim, p, path), "params": p,
                  "seconds": statistics.median(r["seconds"] for r in ok) if ok else None,
                  "cpu_s": statistics.median(r["cpu_s"] for r in ok) if ok else None,
                  "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in ok) if ok else
                  max((r.get("peak_rss_mb", 0) for r in runs), default=None),
                  "error": err, "n": len(ok)}
            log(f"[{dim} x{f:g}] size {pt['size']:,.0f}: {pt['seconds'] and round(pt['seconds'], 2)} s "
                f"({pt['cpu_s'] and round(pt['cpu_s'], 2)} s CPU), "
                f"{pt['peak_rss_mb'] and round(pt['peak_rss_mb'])} MB" + (f" ({err})" if err else ""))
            points.append(pt)
        good = [pt for pt in points if pt["seconds"] is not None]
        xs = [pt["size"] for pt in good]
        out.append({
            "dim": dim, "points": points,
            "time_exponent": slope(xs, [pt["seconds"] for pt in good]) if len(good) == 3 else None,
            "cpu_exponent": slope(xs, [pt["cpu_s"] for pt in good]) if len(good) == 3 else None,
            "rss_exponent": slope(xs, [pt["peak_rss_mb"] for pt in good]) if len(good) == 3 else None,
        })
    return out


def table(results: list[dict]) -> list[str]:
    lines = [
        "| dimension | sizes (x0.5, x1, x2) | median seconds | median CPU seconds | peak RSS MB | time exponent | "
        "CPU exponent | RSS exponent | CPU x2/x1 | met (<= 1.15) |",
        "|---|---|---|---|---|--:|--:|--:|--:|---|",
    ]
    for r in results:
        pts = r["points"]
        sec = " / ".join("killed" if pt["seconds"] is None else f"{pt['seconds']:.2f}" for pt in pts)
        rss = " / ".join("?" if pt["peak_rss_mb"] is None else f"{pt['peak_rss_mb']:,.0f}" for pt in pts)
        cpu = " / ".join("killed" if pt["cpu_s"] is None else f"{pt['cpu_s']:.2f}" for pt in pts)
        sizes = " / ".join(f"{pt['size']:,.0f}" for pt in pts)
        te, ce, re_ = r["time_exponent"], r["cpu_exponent"], r["rss_exponent"]
        ratio = (pts[2]["cpu_s"] / pts[1]["cpu_s"]) if pts[2]["cpu_s"] and pts[1]["cpu_s"] else None
        # Met on CPU time and RSS: wall time on a shared machine measures the neighbours too.
        met = ce is not None and re_ is not None and ce <= TARGET_EXPONENT and re_ <= TARGET_EXPONENT

        def fmt(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        lines.append(f"| {r['dim']} | {sizes} | {sec} | {cpu} | {rss} | {fmt(te)} | {fmt(ce)} | {fmt(re_)} | "
                     f"{fmt(ratio)} | {'yes' if met else 'no'} |")
    return lines


def section(results: list[dict], m: dict, repeat: int) -> str:
    base = next((pt for r in results for pt in r["points"] if pt["factor"] == 1.0 and r["dim"] == "cards"), None)
    v = m["versions"]
    lines = [
        SECTION_START,
        "## Sparse fleets: growth per dimension (issue 15)",
        "",
        f"Written by `benchmarks/growth.py` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {m['nproc']} cores, "
        f"{m['memory']}, {m['cpu']}; load average at start {m['loadavg']}; polars {v['polars']}, duckdb {v['duckdb']}. "
        f"`ailedger report` from the bundle folder (read + compute + report), median of {repeat} runs, one "
        "process per run. Base: the `--shape sparse` bundle (8,192 cards in 4 pools, 45 days, ~30,000 "
        "allocation rows, 30,000 queue waits, 5,000 events, cost rows per pool per day, no telemetry); each "
        "dimension at half, once and twice its base size, the others held. Requests and owners have their own "
        "bases (500,000 requests; 2,000 owners for the requests row, 20,000 for the owners row). The exponent is "
        "the log-log slope over the three sizes (1 = linear); the fixed part of a run (interpreter, small tables) "
        "pulls it below 1, so the ratio of the largest size's CPU time to the middle one's is shown too (2 = linear). "
        "CPU seconds are the child's user + system time (all threads); 'met' is judged on CPU time and RSS, since "
        "wall time on a shared machine also measures the neighbours' load.",
        "",
        *table(results),
        "",
    ]
    if base and base["seconds"] is not None:
        lines.append(
            f"Base size: {base['seconds']:.1f} s (target < {TARGET_BASE_S:.0f} s), peak RSS {base['peak_rss_mb']:,.0f} MB "
            f"(target < {TARGET_BASE_MB:,.0f} MB)."
        )
        lines.append("")
    lines.append(SECTION_END)
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if SECTION_START in old and SECTION_END in old:
        head, rest = old.split(SECTION_START, 1)
        _, tail = rest.split(SECTION_END, 1)
        new = head + text + tail
    else:
        new = old.rstrip() + "\n\n" + text + "\n"
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default=",".join(DIMS), help=f"subset of {','.join(DIMS)}")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data"), help="where the bundles are generated")
    ap.add_argument("--out", default="", help="results file whose growth section is replaced (default: none)")
    ap.add_argument("--json", default="", help="also write the raw results as JSON here")
    ap.add_argument("--mem-cap-gb", type=float, default=12.0)
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args(argv)
    dims = [d for d in a.dims.split(",") if d]
    unknown = sorted(set(dims) - set(DIMS))
    if unknown:
        ap.error(f"unknown dimensions {unknown}; choose from {','.join(DIMS)}")
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    m = harness.machine()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = measure(dims, a.repeat, data, a.mem_cap_gb * 1024, a.timeout, log)
    print("\n".join(table(results)))
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": m, "results": results}, indent=2, default=str))
    if a.out:
        write_section(Path(a.out), section(results, m, a.repeat))
        print(f"wrote the growth section of {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
