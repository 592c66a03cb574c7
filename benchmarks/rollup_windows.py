#!/usr/bin/env python3
"""How reading the store's rollup window by window grows with days, in card order and in quarter order.

    python benchmarks/rollup_windows.py [--cards 1024] [--days 15,30,60] [--repeat 3]

The engine reads the store's rollup a window of quarters at a time
(quarter_activity.ROLLUP_CELLS_PER_WINDOW cells, `quarter_store.window`). When the table lies in
card order (as a rebuild writes it, a slice of cards at a time) every row group spans the whole
period, so each window scans the whole table: windows x cells, which grows with days squared.
In quarter order (a refresh appends its cells through `quarter_store._append_in_quarter_order`)
each window reads only its own
row groups. For each number of days this fills a DuckDB file with synthetic cells (cards x
quarters, the rollup's own columns), reads every window in card order, sorts the table as a
rebuild now does, and reads every window again; it prints the medians of `--repeat` reads, their
ratio, and the growth exponent over the days (the slope of log time against log days: 1 is
linear, 2 quadratic).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import polars as pl  # noqa: E402

from cost_engine import quarter_activity, quarter_store  # noqa: E402

QUARTERS_A_DAY = 96


def _fill(con: duckdb.DuckDBPyConnection, cards: int, days: int) -> None:
    """Cards x quarters cells in card order, as a rebuild writes them."""
    con.execute(f"CREATE TABLE {quarter_store.TABLE} ({quarter_store._DDL[quarter_store.TABLE]})")
    n_q = days * QUARTERS_A_DAY
    con.execute(
        f"INSERT INTO {quarter_store.TABLE} ({quarter_store._COLS}) "
        "SELECT printf('gpu-%05d', c), q, 15, q * 900000000, q * 900000000 + 840000000, 900.0, 450.0, 450.0, "
        "30000.0, 100.0, 270000.0, 90000.0, 900.0, 0.0, 0, 0, 0, false, false "
        "FROM range($cards) t(c), range($n) s(q) ORDER BY c, q",
        {"cards": cards, "n": n_q},
    )


def _read_all(con: duckdb.DuckDBPyConnection, names: pl.Series, n_q: int) -> tuple[float, int]:
    """Every window as the engine reads them: seconds and cells read."""
    step = max(1, quarter_activity.ROLLUP_CELLS_PER_WINDOW // max(1, names.len()))
    t0, cells = time.perf_counter(), 0
    for qa in range(0, n_q, step):
        cells += quarter_store.window(con, names, qa, qa + step).height
    return time.perf_counter() - t0, cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cards", type=int, default=1024)
    ap.add_argument("--days", default="15,30,60")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    days = [int(d) for d in args.days.split(",")]
    names = pl.Series("gpu_id", [f"gpu-{c:05d}" for c in range(args.cards)])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in days:
            con = duckdb.connect(str(Path(tmp) / f"r{d}.duckdb"))
            _fill(con, args.cards, d)
            con.execute("CHECKPOINT")
            n_q = d * QUARTERS_A_DAY
            card_order = [_read_all(con, names, n_q) for _ in range(args.repeat)]
            # Rewritten as a refresh writes the table: its cells appended in quarter order.
            con.execute(f"CREATE TEMP TABLE _cells AS SELECT * FROM {quarter_store.TABLE}")
            con.execute(f"DELETE FROM {quarter_store.TABLE}")
            quarter_store._append_in_quarter_order(con, "_cells")
            con.execute("DROP TABLE _cells")
            con.execute("CHECKPOINT")
            quarter_order = [_read_all(con, names, n_q) for _ in range(args.repeat)]
            con.close()
            assert card_order[0][1] == quarter_order[0][1] == args.cards * n_q
            a = statistics.median(t for t, _ in card_order)
            b = statistics.median(t for t, _ in quarter_order)
            rows.append((d, args.cards * n_q, a, b))
            print(f"days {d:>4}: {args.cards * n_q:>11,} cells; all windows in card order {a:7.3f} s, "
                  f"in quarter order {b:7.3f} s ({a / b:5.1f}x)", flush=True)

    def slope(col: int) -> float:
        xs = [math.log(r[0]) for r in rows]
        ys = [math.log(r[col]) for r in rows]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)

    if len(rows) > 1:
        print(f"growth exponent over days (medians of {args.repeat}): card order {slope(2):.2f}, "
              f"quarter order {slope(3):.2f}")


if __name__ == "__main__":
    main()
