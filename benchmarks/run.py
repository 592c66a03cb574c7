#!/usr/bin/env python3
"""Fleet-scale benchmarks of ailedger: ingest, full report, peak RSS, drill-down, page.

    python benchmarks/run.py [--gpus 64,256,1024] [--days 30] [--repeat 3]
        [--out FILE (default benchmarks/data/RESULTS.md)] [--stages floor,pandas,ingest,...] [--mem-cap-gb N]
    python benchmarks/run.py --growth [growth.py's options]   (sparse fleets, 3 sizes per dimension)

Bundles are generated once per fleet size under benchmarks/data/ (gitignored) with
sample_data/generate.py (every table Parquet, 1-minute telemetry) and reused. Every
measured stage runs in its own subprocess (this file with --worker STAGE): the child
times its own work and prints one JSON line; the parent takes the child's peak RSS from
os.wait4's rusage (ru_maxrss) and kills a child whose RSS passes --mem-cap-gb, recording
that as a failed run. Each figure is the median of --repeat runs, with min and max.

The two baselines (the DuckDB floor and the pandas merge_asof script) run in the same
harness run, on the same files, with the same subprocess mechanism, so the ratios compare
like with like. See benchmarks/README.md for what each figure means and the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULT_TAG = "BENCH_RESULT "
DRILL_PROJECT = "llm-pretrain"  # the project whose records the drill-down reads
DRILL_CALLS = 5  # drill-down calls per worker process (the first is the cold one)
ALL_STAGES = ("floor", "pandas", "rollup", "ingest", "report_bundle", "report_store", "drilldown", "lineage", "page")
ROLLUP_WIDTH_S = 300  # bucket width of the rollup stage
ROLLUP_CHUNKS = 8  # card slices of the rollup stage (bounded memory)
STORE_STAGES = ("report_store", "drilldown", "lineage", "page")

# The scale targets (benchmarks/README.md, "Targets"): 1,024 GPUs, 30 days, 2 cores.
TARGET_REPORT_VS_FLOOR = 10.0  # report time <= 10 x floor
TARGET_PANDAS_VS_REPORT = 10.0  # pandas time >= 10 x report
TARGET_RSS_MB = 2048.0
TARGET_INGEST_ROWS_S = 2_000_000.0
TARGET_DRILL_MS = 300.0
TARGET_WARM_PAGE_S = 1.0


# =============================================================================================
# Workers: run in a child process, print one JSON line tagged RESULT_TAG.
# =============================================================================================


def _now() -> float:
    return time.perf_counter()


def _config(bundle: Path):
    from cost_engine.config import load_config

    return load_config(bundle / "ailedger.toml")


def work_floor(bundle: Path, **_) -> dict:
    """The floor: one DuckDB pass over the telemetry Parquet, sum of util and power per card."""
    import duckdb

    t0 = _now()
    con = duckdb.connect()
    rows = con.execute(
        "SELECT gpu_id, sum(util_pct) AS util, sum(power_w) AS power "
        "FROM read_parquet(?) GROUP BY gpu_id",
        [str(bundle / "telemetry.parquet")],
    ).fetchall()
    con.close()
    return {"seconds": _now() - t0, "cards": len(rows)}


def work_pandas(bundle: Path, **_) -> dict:
    """What an analyst would write: GPU-hours and energy per owner with pd.merge_asof.

    Each sample stands for the time until the card's next sample (capped at 5 minutes);
    energy is the counter delta (power x time on a reset); samples are matched to the
    allocation that started last on the card (merge_asof by gpu_id) and kept while it runs;
    GPU-hours are weighted by the allocation's share and the card's capacity (MIG slices).
    """
    import pandas as pd

    t0 = _now()
    tel = pd.read_parquet(bundle / "telemetry.parquet", columns=["ts", "gpu_id", "util_pct", "power_w", "energy_j"])
    alloc = pd.read_parquet(bundle / "allocations.parquet", columns=["gpu_id", "start", "end", "owner", "source", "share"])
    aliases = pd.read_parquet(bundle / "aliases.parquet", columns=["source", "key", "project"])
    inventory = pd.read_parquet(bundle / "inventory.parquet", columns=["gpu_id", "capacity"])

    tel = tel.sort_values(["gpu_id", "ts"])
    by_card = tel.groupby("gpu_id", sort=False)
    dt = (by_card["ts"].shift(-1) - tel["ts"]).dt.total_seconds()
    tel["dt_s"] = dt.clip(upper=300).fillna(0.0)
    delta = by_card["energy_j"].shift(-1) - tel["energy_j"]
    tel["joules"] = delta.where(delta >= 0, tel["power_w"] * tel["dt_s"])

    tel = tel.sort_values("ts")
    alloc = alloc.sort_values("start")
    m = pd.merge_asof(tel, alloc, left_on="ts", right_on="start", by="gpu_id", direction="backward")
    m = m[m["ts"] < m["end"]]
    m = m.merge(inventory, on="gpu_id", how="left")  # MIG instances are a fraction of a card
    m["gpu_hours"] = m["dt_s"] * m["share"] * m["capacity"].fillna(1.0) / 3600.0
    m["energy_kwh"] = m["joules"].fillna(0.0) * m["share"] / 3.6e6
    m = m.merge(aliases, left_on=["source", "owner"], right_on=["source", "key"], how="left")
    m["project"] = m["project"].fillna(m["owner"])
    out = m.groupby("project")[["gpu_hours", "energy_kwh"]].sum()
    return {
        "seconds": _now() - t0,
        "owners": len(out),
        "gpu_hours": float(out["gpu_hours"].sum()),
        "energy_kwh": float(out["energy_kwh"].sum()),
    }


def work_rollup(bundle: Path, db: Path, **_) -> dict:
    """cost_engine.rollup on DuckDB from the telemetry Parquet to Parquet: 300 s buckets, 8 card slices."""
    import pyarrow.parquet as pq

    from cost_engine.rollup import rollup_duckdb_to_parquet

    out_dir = db.parent / "work" / f"rollup-{bundle.name}"
    t0 = _now()
    rollup_duckdb_to_parquet(bundle / "telemetry.parquet", out_dir, ROLLUP_WIDTH_S, card_chunks=ROLLUP_CHUNKS)
    seconds = _now() - t0
    buckets = sum(pq.ParquetFile(f).metadata.num_rows for f in out_dir.glob("*.parquet"))
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"seconds": seconds, "buckets": buckets, "width_s": ROLLUP_WIDTH_S, "card_chunks": ROLLUP_CHUNKS}


def work_ingest(bundle: Path, db: Path, **_) -> dict:
    """read_bundle + store.ingest into a fresh file: the measured figure covers both, as a user
    waits for both; read_s and ingest_s split it."""
    from cost_engine import store
    from cost_engine.bundle import read_bundle

    for f in (db, db.with_name(db.name + ".wal")):
        f.unlink(missing_ok=True)
    cfg = _config(bundle)
    t0 = _now()
    b = read_bundle(bundle, cfg)
    t1 = _now()
    rows = sum(t.height for t in b.tables.values())
    # The quarter-hour rollup runs after the ingest's commit (store.ingest, rollup=...): timed apart.
    res = store.ingest(db, b, source=str(bundle), rollup=cfg.activity)
    t2 = _now() - (res.rollup_s or 0.0)
    return {"seconds": t2 - t0, "read_s": t1 - t0, "ingest_s": t2 - t1, "rows": rows,
            "rows_per_s": rows / (t2 - t0), "read_rows_per_s": rows / (t1 - t0),
            "ingest_rows_per_s": rows / (t2 - t1), "rollup_s": res.rollup_s, "rollup_error": res.rollup_error,
            "telemetry_rows": b["telemetry"].height, "db_mb": db.stat().st_size / 2**20}


def _report_from(source: Path, cfg, load) -> dict:
    """`load()` returns (bundle, telemetry source or None), as api.load_source does."""
    from cost_engine.engine import compute
    from cost_engine.report import build_report

    t0 = _now()
    b, telemetry = load()
    t1 = _now()
    comp = compute(b, cfg, telemetry=telemetry)
    t2 = _now()
    rep = build_report(comp)
    t3 = _now()
    return {
        "seconds": t3 - t0, "load_s": t1 - t0, "compute_s": t2 - t1, "report_s": t3 - t2,
        "allocated_gpu_hours": rep["totals"]["allocated_gpu_hours"],
        "energy_kwh_gpu": rep["totals"]["energy_kwh_gpu"],
        "cost": rep["totals"]["cost"],
        "difference": rep["reconciliation"]["difference"],
    }


def work_report_bundle(bundle: Path, **_) -> dict:
    """build_report(compute(read_bundle(...))): the full report from the bundle folder."""
    from cost_engine.bundle import read_bundle

    t0 = _now()
    cfg = _config(bundle)
    out = _report_from(bundle, cfg, lambda: (read_bundle(bundle, cfg), None))
    out["seconds"] = _now() - t0
    return out


def work_report_store(bundle: Path, db: Path, **_) -> dict:
    """The full report from the DuckDB store, as the CLI and the dashboard run it
    (api.load_source: every table but telemetry and requests, which the engine reads window by
    window and in batches)."""
    from cost_engine import api

    t0 = _now()
    cfg = _config(bundle)
    out = _report_from(db, cfg, lambda: api.load_source(db, cfg))
    out["seconds"] = _now() - t0
    return out


def work_report_store_raw(bundle: Path, db: Path, **_) -> dict:
    """The same report with the rollup off ([engine] rollup = "off"): every raw sample read."""
    from cost_engine import api

    t0 = _now()
    cfg = _config(bundle).model_copy(update={"engine": _config(bundle).engine.model_copy(update={"rollup": "off"})})
    out = _report_from(db, cfg, lambda: api.load_source(db, cfg))
    out["seconds"] = _now() - t0
    return out


def work_quarter_rollup(bundle: Path, db: Path, **_) -> dict:
    """The store's quarter-hour rollup rebuilt from all its telemetry (quarter_store.refresh)."""
    from cost_engine import quarter_store, store

    cfg = _config(bundle)
    with store.connect(db, read_only=False) as con:
        con.execute("DELETE FROM meta WHERE key IN ('rollup_rule', 'rollup_ingests')")
    t0 = _now()
    r = quarter_store.refresh(db, cfg.activity)
    return {"seconds": _now() - t0, "cells": r.cells, "cards": r.cards}


def work_boundary_switch(bundle: Path, db: Path, **_) -> dict:
    """A dashboard rule change: the report under the bundle's config, then under the energy-only
    boundary (timed), in one process."""
    from cost_engine import api
    from cost_engine.engine import compute
    from cost_engine.report import build_report

    cfg = _config(bundle)
    b, telemetry = api.load_source(db, cfg)
    memo: dict = {}  # kept per data version, as the dashboard keeps it (pages/common.py)
    t0 = _now()
    build_report(compute(b, cfg, telemetry=telemetry, memo=memo))
    first = _now() - t0
    other = cfg.model_copy(update={"boundary": cfg.boundary.model_copy(update={"name": "energy_only"})})
    t0, c0 = _now(), time.process_time()
    rep = build_report(compute(b, other, telemetry=telemetry, memo=memo))
    return {"seconds": _now() - t0, "cpu_s": time.process_time() - c0, "first_s": first, "cost": rep["totals"]["cost"]}


def work_drilldown(db: Path, project: str, **_) -> dict:
    """One project's allocation records from the store, as the dashboard's drill-down reads them.

    Two store queries: the project's owner keys (aliases), then its allocations (all of
    them, not one page). Each call opens the store, as query_records does.
    """
    from cost_engine import store

    query_ms, rows = [], 0
    for _ in range(DRILL_CALLS):
        t0 = _now()
        keys = store.query_records(db, "aliases", filters={"project": [project]}, limit=None)
        owners = sorted(set(keys["key"].to_list()) | {project})
        recs = store.query_records(db, "allocations", filters={"owner": owners}, limit=None)
        query_ms.append((_now() - t0) * 1000)
        rows = recs.height
    return {"query_ms": query_ms, "records": rows}


def work_lineage(bundle: Path, db: Path, project: str, **_) -> dict:
    """lineage.explain(project) on a Computation built from the store beforehand (not timed)."""
    from cost_engine import api, lineage
    from cost_engine.engine import compute

    cfg = _config(bundle)
    b, telemetry = api.load_source(db, cfg)
    comp = compute(b, cfg, telemetry=telemetry)
    explain_ms, n_alloc = [], 0
    for _ in range(DRILL_CALLS):
        t0 = _now()
        ex = lineage.explain(comp, project=project)
        explain_ms.append((_now() - t0) * 1000)
        n_alloc = ex.allocations.height
    return {"explain_ms": explain_ms, "explained_allocations": n_alloc}


def work_page(db: Path, **_) -> dict:
    """The dashboard's default page through streamlit's AppTest: cold = first run, warm = second."""
    os.environ["AILEDGER_SOURCE"] = str(db)
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=3600)
    t0 = _now()
    at.run()
    cold = _now() - t0
    errors = [str(e.value) for e in at.exception]
    t0 = _now()
    at.run()
    warm = _now() - t0
    errors += [str(e.value) for e in at.exception]
    if errors:
        raise RuntimeError("page raised: " + "; ".join(errors))
    return {"cold_s": cold, "warm_s": warm, "metrics": len(at.metric)}


WORKERS = {
    "floor": work_floor,
    "pandas": work_pandas,
    "rollup": work_rollup,
    "ingest": work_ingest,
    "report_bundle": work_report_bundle,
    "report_store": work_report_store,
    "report_store_raw": work_report_store_raw,
    "quarter_rollup": work_quarter_rollup,
    "boundary_switch": work_boundary_switch,
    "drilldown": work_drilldown,
    "lineage": work_lineage,
    "page": work_page,
}


def worker_main(a: argparse.Namespace) -> int:
    os.chdir(ROOT)
    out = WORKERS[a.worker](bundle=Path(a.bundle), db=Path(a.db), project=a.project)
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(out), flush=True)
    return 0


# =============================================================================================
# Parent: data, subprocesses with RSS watchdog, statistics, tables.
# =============================================================================================


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_worker(stage: str, bundle: Path, db: Path, cap_mb: float, timeout_s: float) -> dict:
    """Run one stage in a child; returns its JSON plus peak_rss_mb, or {'error': ...}."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", stage, "--bundle", str(bundle),
           "--db", str(db), "--project", DRILL_PROJECT]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killed: list[str] = []
    out_chunks: list[str] = []
    err_chunks: list[str] = []
    readers = [
        threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True),  # type: ignore[union-attr]
        threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True),  # type: ignore[union-attr]
    ]
    for r in readers:
        r.start()
    done = threading.Event()

    def watchdog() -> None:
        start = time.monotonic()
        while not done.wait(0.05):
            rss = _rss_mb(proc.pid)
            if rss > cap_mb:
                killed.append(f"killed: RSS {rss:,.0f} MB passed the cap of {cap_mb:,.0f} MB")
            elif time.monotonic() - start > timeout_s:
                killed.append(f"killed: ran past {timeout_s:.0f} s")
            else:
                continue
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return

    wd = threading.Thread(target=watchdog, daemon=True)
    wd.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    wd.join()
    for r in readers:
        r.join()
    peak = usage.ru_maxrss / 1024  # KiB on Linux
    stdout, stderr = "".join(out_chunks), "".join(err_chunks)
    if killed:
        return {"error": killed[0], "peak_rss_mb": peak}
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:300]}", "peak_rss_mb": peak}
    res = json.loads(lines[-1][len(RESULT_TAG):])
    res["peak_rss_mb"] = peak
    # CPU seconds of the whole child (all threads, start-up included): on a shared, loaded machine
    # wall time stretches with the load, CPU time much less, so growth is fitted on both.
    res["cpu_s"] = usage.ru_utime + usage.ru_stime
    return res


def ensure_bundle(data: Path, gpus: int, days: int, seed: int) -> tuple[Path, float | None]:
    """The fleet's bundle under data/, generated once (returns path, generation seconds or None)."""
    from sample_data.generate import generate_bundle

    path = data / f"g{gpus}-d{days}-s{seed}"
    manifest = path / "anomalies.json"
    want = dict(gpus=gpus, days=days, seed=seed)
    if manifest.is_file():
        gen = json.loads(manifest.read_text())["generator"]
        if all(gen.get(k) == v for k, v in want.items()) and (path / "telemetry.parquet").is_file():
            return path, None
    t0 = _now()
    generate_bundle(path, gpus=gpus, days=days, seed=seed, fmt="parquet")
    return path, _now() - t0


def bundle_rows(path: Path) -> dict:
    return json.loads((path / "anomalies.json").read_text())["rows"]


def stats(values: list[float]) -> dict | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def bench_size(gpus: int, a: argparse.Namespace, cap_mb: float, log) -> dict:
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    bundle, gen_s = ensure_bundle(data, gpus, a.days, a.seed)
    log(f"[{gpus} GPUs] bundle {bundle}" + (f" generated in {gen_s:.1f} s" if gen_s else " (reused)"))
    store_db = data / f"{bundle.name}.duckdb"
    work = data / "work"
    work.mkdir(exist_ok=True)
    runs: dict[str, list[dict]] = {}
    notes: list[str] = []

    def run(stage: str, db: Path) -> list[dict]:
        out = []
        for i in range(a.repeat):
            res = run_worker(stage, bundle, db, cap_mb, a.timeout)
            short = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()
                     if not isinstance(v, list)}
            log(f"[{gpus} GPUs] {stage} run {i + 1}/{a.repeat}: {short}")
            out.append(res)
            if "error" in res:
                notes.append(f"{stage}: {res['error']} (run {i + 1}; remaining runs skipped)")
                break
        return out

    stages = [s for s in ALL_STAGES if s in a.stages]
    for stage in stages:
        if stage == "ingest":
            results = []
            for i in range(a.repeat):
                db = work / f"ingest-{i}.duckdb"
                res = run_worker("ingest", bundle, db, cap_mb, a.timeout)
                log(f"[{gpus} GPUs] ingest run {i + 1}/{a.repeat}: "
                    + str({k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()}))
                results.append(res)
                if "error" in res:
                    notes.append(f"ingest: {res['error']} (run {i + 1}; remaining runs skipped)")
                    break
                # The last good ingest becomes the fleet's store for the store stages.
                for f in (store_db, store_db.with_name(store_db.name + ".wal")):
                    f.unlink(missing_ok=True)
                shutil.move(db, store_db)
                db.with_name(db.name + ".wal").unlink(missing_ok=True)
            runs["ingest"] = results
            continue
        if stage in STORE_STAGES:
            if not store_db.is_file():
                notes.append(f"{stage}: skipped, no store (ingest did not complete)")
                runs[stage] = []
                continue
            shutil.copyfile(bundle / "ailedger.toml", store_db.with_suffix(".toml"))  # api.find_config
        runs[stage] = run(stage, store_db)
    return {"gpus": gpus, "days": a.days, "repeat": a.repeat, "cap_mb": cap_mb, "bundle": str(bundle), "generate_s": gen_s,
            "rows": bundle_rows(bundle), "runs": runs, "notes": notes,
            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def summarise(res: dict) -> list[dict]:
    """Rows of the results table: measure, unit, stats, ratio text, target text, met."""
    runs = res["runs"]

    def ok(stage: str) -> list[dict]:
        return [r for r in runs.get(stage, []) if "error" not in r]

    def col(stage: str, key: str, scale: float = 1.0) -> dict | None:
        vals = []
        for r in ok(stage):
            v = r.get(key)
            if isinstance(v, list):
                vals += [x * scale for x in v]
            elif v is not None:
                vals.append(v * scale)
        return stats(vals)

    def failed(stage: str) -> str | None:
        errs = [r["error"] for r in runs.get(stage, []) if "error" in r]
        return errs[0] if errs else None

    floor = col("floor", "seconds")
    pandas = col("pandas", "seconds")
    rows: list[dict] = []

    def add(measure, unit, st, ratio="", target="", met=None, stage=None):
        error = failed(stage) if (stage and st is None) else None
        if stage and st is None and not error and not runs.get(stage):
            error = "not run" if stage not in runs else "skipped (no store)"
        rows.append({"measure": measure, "unit": unit, "stats": st, "ratio": ratio, "target": target,
                     "met": met, "error": error})

    add("floor: DuckDB sum(util), sum(power) per card", "s", floor, stage="floor")
    add("baseline: pandas merge_asof per owner", "s", pandas, stage="pandas")
    ro = col("rollup", "seconds")
    add(f"rollup: rollup_duckdb_to_parquet, {ROLLUP_WIDTH_S} s buckets, {ROLLUP_CHUNKS} card slices",
        "s", ro,
        f"{ro['median'] / floor['median']:,.1f}x floor" if ro and floor else "", stage="rollup")
    add("  rollup peak RSS", "MB", col("rollup", "peak_rss_mb"))
    add("  rollup rows out", "rows", col("rollup", "buckets"))
    add("ingest (read_bundle + store.ingest, fresh file)", "rows/s", col("ingest", "rows_per_s"),
        target=f">= {TARGET_INGEST_ROWS_S / 1e6:g}M rows/s",
        met=None if not ok("ingest") else col("ingest", "rows_per_s")["median"] >= TARGET_INGEST_ROWS_S, stage="ingest")
    add("  wall time (read + ingest)", "s", col("ingest", "seconds"))
    add("  of which read_bundle (validate, spill)", "s", col("ingest", "read_s"))
    add("  of which store.ingest", "s", col("ingest", "ingest_s"))
    add("  ingest peak RSS (read_bundle + ingest)", "MB", col("ingest", "peak_rss_mb"))
    for stage, label in (("report_bundle", "full report from the bundle"), ("report_store", "full report from the store")):
        rep = col(stage, "seconds")
        ratio, met = "", None
        if rep and floor:
            r_floor = rep["median"] / floor["median"]
            ratio = f"{r_floor:,.1f}x floor"
            met = r_floor <= TARGET_REPORT_VS_FLOOR
            if pandas:
                r_pd = pandas["median"] / rep["median"]
                ratio += f"; pandas/report {r_pd:,.2f}"
                met = met and r_pd >= TARGET_PANDAS_VS_REPORT
        add(label, "s", rep, ratio, f"<= {TARGET_REPORT_VS_FLOOR:g}x floor, pandas >= {TARGET_PANDAS_VS_REPORT:g}x",
            met, stage=stage)
        add("  load (read_bundle / load_bundle)", "s", col(stage, "load_s"))
        add("  compute", "s", col(stage, "compute_s"))
        add("  build_report", "s", col(stage, "report_s"))
        rss = col(stage, "peak_rss_mb")
        add("  peak RSS", "MB", rss, target=f"< {TARGET_RSS_MB:,.0f} MB",
            met=None if rss is None else rss["median"] < TARGET_RSS_MB)
        killed = [r["peak_rss_mb"] for r in runs.get(stage, []) if "error" in r and "RSS" in r["error"]]
        if rss is None and killed:
            rows[-1]["error"] = f"over {max(killed):,.0f} MB when killed at the cap"
            rows[-1]["met"] = False
    q = col("drilldown", "query_ms")
    add("drill-down: store.query_records (aliases + allocations of one project)", "ms", q,
        target=f"< {TARGET_DRILL_MS:g} ms", met=None if q is None else q["median"] < TARGET_DRILL_MS, stage="drilldown")
    e = col("lineage", "explain_ms") or col("drilldown", "explain_ms")
    add("drill-down: lineage.explain(project) on a computation", "ms", e,
        target=f"< {TARGET_DRILL_MS:g} ms", met=None if e is None else e["median"] < TARGET_DRILL_MS, stage="lineage")
    add("page: cold (first AppTest run, fresh process)", "s", col("page", "cold_s"), stage="page")
    w = col("page", "warm_s")
    add("page: warm (second AppTest run)", "s", w, target=f"< {TARGET_WARM_PAGE_S:g} s",
        met=None if w is None else w["median"] < TARGET_WARM_PAGE_S)
    add("  page peak RSS", "MB", col("page", "peak_rss_mb"))
    if pandas and floor:
        rows[1]["ratio"] = f"{pandas['median'] / floor['median']:,.1f}x floor"
    return rows


def _fmt(v: float, unit: str) -> str:
    if unit == "rows/s":
        return f"{v / 1e6:,.2f}M"
    if unit == "MB":
        return f"{v:,.0f}"
    if unit == "rows":
        return f"{v:,.0f}"
    if unit == "ms":
        return f"{v:,.1f}"
    return f"{v:,.3f}" if v < 10 else f"{v:,.1f}"


def table_lines(res: dict) -> list[str]:
    rows = summarise(res)
    out = ["| measure | unit | median | min | max | n | ratio | target | met |",
           "|---|---|--:|--:|--:|--:|---|---|---|"]
    for r in rows:
        st = r["stats"]
        if st is None:
            if not r["error"] and not r["target"]:
                continue
            cells = ["–", "–", "–", "0"]
        else:
            cells = [_fmt(st["median"], r["unit"]), _fmt(st["min"], r["unit"]), _fmt(st["max"], r["unit"]), str(st["n"])]
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        if r["error"]:
            met = r["error"] if r["error"] in ("not run", "skipped (no store)") else f"**no**: {r['error']}"
        out.append(f"| {r['measure']} | {r['unit']} | {' | '.join(cells)} | {r['ratio']} | {r['target']} | {met} |")
    return out


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    vers = {"python": platform.python_version()}
    for mod in ("polars", "duckdb", "pandas", "pyarrow", "streamlit"):
        try:
            vers[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing module is reported, not fatal
            vers[mod] = "not installed"
    return {"nproc": os.cpu_count(), "memory": mem, "cpu": cpu, "os": platform.platform(),
            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()), "versions": vers}


def write_results(path: Path, results: list[dict], m: dict, a: argparse.Namespace, cap_mb: float) -> None:
    v = m["versions"]
    lines = [
        "# Benchmark results",
        "",
        f"Written by `benchmarks/run.py` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"(`--seed {a.seed}`). Medians of the runs (`n` values each); "
        "see `benchmarks/README.md` for what each figure means. The targets (`benchmarks/README.md`) are for "
        "1,024 GPUs; the smaller fleets show the trend. A run whose RSS passed the cap was killed: "
        "it did not fit, and its peak RSS is a lower bound.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']} ({m['nproc']} cores visible to the process)",
        f"- memory: {m['memory']}",
        f"- OS: {m['os']}; load average at start: {m['loadavg']}",
        f"- versions: python {v['python']}, polars {v['polars']}, duckdb {v['duckdb']}, pandas {v['pandas']}, "
        f"pyarrow {v['pyarrow']}, streamlit {v['streamlit']}",
        "",
    ]
    for res in results:
        rows = res["rows"]
        lines += [
            f"## {res['gpus']:,} GPUs, {res['days']} days",
            "",
            f"{rows['gpu_ids']:,} gpu_ids, {rows['telemetry']:,} telemetry rows, {rows['requests']:,} requests, "
            f"{rows['allocations']:,} allocations (`{Path(res['bundle']).name}`); "
            f"RSS cap {res.get('cap_mb', cap_mb):,.0f} MB; load average after the size: {res.get('loadavg', '?')}.",
            "",
            *table_lines(res),
            "",
        ]
        if res["notes"]:
            lines += [f"- {n}" for n in res["notes"]] + [""]
        pd_runs = [r for r in res["runs"].get("pandas", []) if "error" not in r]
        rep_runs = [r for r in res["runs"].get("report_bundle", []) if "error" not in r]
        if pd_runs and rep_runs:
            lines += [
                f"Sanity: pandas baseline {pd_runs[0]['gpu_hours']:,.1f} GPU-hours and {pd_runs[0]['energy_kwh']:,.1f} kWh "
                f"on {pd_runs[0]['owners']} owners; engine {rep_runs[0]['allocated_gpu_hours']:,.1f} allocated GPU-hours and "
                f"{rep_runs[0]['energy_kwh_gpu']:,.1f} GPU kWh (the baseline counts sampled time of the last-started "
                "allocation only, so it is close but not equal).",
                "",
            ]
    from benchmarks.sections import keep_sections  # the forecast backtest's section stays (benchmarks/backtest.py)

    path.write_text(keep_sections(path, "\n".join(lines)), encoding="utf-8")


def print_table(res: dict) -> None:
    print(f"\n== {res['gpus']:,} GPUs, {res['days']} days: {res['rows']['telemetry']:,} telemetry rows ==")
    rows = summarise(res)
    w = max(len(r["measure"]) for r in rows)
    print(f"{'measure':{w}}  {'unit':6} {'median':>10} {'min':>10} {'max':>10}  ratio / target")
    for r in rows:
        st = r["stats"]
        if st is None:
            if r["error"]:
                print(f"{r['measure']:{w}}  {r['unit']:6} {'–':>10} {'–':>10} {'–':>10}  {r['error']}")
            continue
        met = {True: "  [met]", False: "  [NOT met]", None: ""}[r["met"]]
        extra = "; ".join(x for x in (r["ratio"], r["target"]) if x)
        print(f"{r['measure']:{w}}  {r['unit']:6} {_fmt(st['median'], r['unit']):>10} {_fmt(st['min'], r['unit']):>10} "
              f"{_fmt(st['max'], r['unit']):>10}  {extra}{met}")
    for n in res["notes"]:
        print(f"  note: {n}")


def _default_cap_mb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) / 1024 * 0.8
    except OSError:
        pass
    return 16 * 1024.0


def render(a: argparse.Namespace) -> int:
    """Merge saved raw results (later files add or replace stages of a size) and write --out."""
    merged: dict[int, dict] = {}
    m = None
    cap = None
    for f in a.render:
        data = json.loads(Path(f).read_text())
        m = m or data["machine"]
        cap = cap or data.get("cap_mb")
        for res in data["results"]:
            cur = merged.setdefault(res["gpus"], {**res, "runs": {}, "notes": []})
            cur["runs"].update(res["runs"])
            cur["notes"] = [n for n in cur["notes"] if n.split(":")[0] not in res["runs"]] + res["notes"]
            for k in ("repeat", "loadavg", "bundle", "rows"):
                cur[k] = res.get(k, cur.get(k))
            cur["cap_mb"] = cur.get("cap_mb") or res.get("cap_mb")  # the first run's cap (the one that killed)
    results = [merged[k] for k in sorted(merged)]
    for res in results:
        print_table(res)
    if a.out:
        write_results(Path(a.out), results, m, a, cap or _default_cap_mb())
        print(f"\nwrote {a.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--growth"]:
        # The sparse-fleet growth measurement (3 sizes per dimension) lives in growth.py; this keeps
        # one entry point for every benchmark.
        import growth

        return growth.main(args[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="64,256,1024", help="comma-separated fleet sizes (physical cards)")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (median, min, max)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None,
                    help="results file (default RESULTS.md in --data, gitignored; name benchmarks/RESULTS.md "
                         "to update the committed one; '' for none)")
    ap.add_argument("--json", default="", help="also write the raw results as JSON here")
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / "data"), help="where bundles and stores live")
    ap.add_argument("--stages", default=",".join(ALL_STAGES), help=f"subset of {','.join(ALL_STAGES)}")
    ap.add_argument("--mem-cap-gb", type=float, default=None,
                    help="kill a stage whose RSS passes this (default: 80%% of MemAvailable at start)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before a stage run is killed")
    # worker mode (internal)
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help=argparse.SUPPRESS)
    ap.add_argument("--db", default="", help=argparse.SUPPRESS)
    ap.add_argument("--project", default=DRILL_PROJECT, help=argparse.SUPPRESS)
    ap.add_argument("--render", nargs="+", default=None, metavar="JSON",
                    help="write --out from saved --json files (merged by fleet size) instead of running")
    a = ap.parse_args(argv)
    if a.out is None:  # a quick run never overwrites the committed results
        a.out = str(Path(a.data) / "RESULTS.md")
    if a.worker:
        return worker_main(a)
    if a.render:
        return render(a)

    a.stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    unknown = sorted(set(a.stages) - set(ALL_STAGES))
    if unknown:
        ap.error(f"unknown stages: {', '.join(unknown)}")
    sizes = [int(x) for x in a.gpus.split(",") if x.strip()]
    cap_mb = a.mem_cap_gb * 1024 if a.mem_cap_gb else _default_cap_mb()
    m = machine()
    print(f"machine: {m['cpu']}, {m['nproc']} cores, {m['memory']}; load {m['loadavg']}; RSS cap {cap_mb:,.0f} MB",
          flush=True)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()), flush=True)

    def log(msg: str) -> None:
        print(f"{datetime.now():%H:%M:%S} {msg}", flush=True)

    results = []
    for gpus in sizes:
        res = bench_size(gpus, a, cap_mb, log)
        results.append(res)
        print_table(res)
        if a.out:  # write after every size, so a long run leaves what it finished
            write_results(Path(a.out), results, m, a, cap_mb)
        if a.json:
            Path(a.json).write_text(json.dumps({"machine": m, "cap_mb": cap_mb, "results": results}, indent=1,
                                               default=str))
    if a.out:
        print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
