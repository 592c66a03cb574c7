"""A big, sparse fleet as real scheduler traces look: thousands of cards, scattered jobs, long queues, no telemetry.

    python sample_data/generate.py --shape sparse --out DIR [--gpus 8192] [--days 45]
        [--allocations 30000] [--waits 30000] [--events 5000] [--cost-span-hours 24]
        [--owners 200] [--requests 0] [--seed 7]

The dense generator (generate.py) packs a small fleet with work and one-minute telemetry; public
cluster traces look different: most cards free most of the time, jobs of one to eight cards
(some on a fraction of a card) scattered over weeks, tens of thousands of queue waits of
minutes to days, events on single cards, nodes and whole pools, and finance rows per pool per
day, but no telemetry at all. That shape is what the engine must stay linear on (docs/scale.md),
so each of its dimensions is a parameter the benchmarks double one at a time.

Deterministic: the same arguments give byte-identical files.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl

if __package__ in (None, ""):  # run as a script: make `cost_engine` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_engine import csv_guard  # noqa: E402
from cost_engine.contract import TABLES  # noqa: E402

CARDS_PER_NODE = 8
# Four pools of different accelerators, with their share of the fleet and price per card-hour.
POOLS = (
    ("h100-sxm", "H100-SXM-80GB", 0.40, 2.10),
    ("a100-pcie", "A100-PCIE-40GB", 0.30, 1.10),
    ("l40s", "L40S-48GB", 0.20, 0.80),
    ("h200-sxm", "H200-SXM-141GB", 0.10, 2.90),
)
# Per pool per cost span: category, amount per card-day; the driver is the category's default.
POOL_COSTS = (("depreciation", 1.60), ("facility", 0.35), ("network", 0.12))
# Fleet-wide per cost span (no pool): category, amount per card-day.
FLEET_COSTS = (("software", 0.05), ("operations", 0.20))
EVENT_KINDS = ("degraded_hardware", "maintenance", "network_bottleneck", "storage_bottleneck", "data_loading")
MODELS = ("llama-3-70b", "mixtral-8x7b", "qwen2-72b")
RENTED = POOLS[3][0]  # this pool is rented: a price per GPU-hour instead of depreciation
TIMEZONE = "Asia/Kolkata"  # half-hour offset: local midnights never fall on the UTC cost spans


def _iso(t: np.ndarray) -> list[str]:
    return [datetime.fromtimestamp(int(x), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") for x in t]


def _inventory(gpus: int) -> pl.DataFrame:
    rows = []
    n_left = gpus
    for i, (pool, acc, frac, _) in enumerate(POOLS):
        n = n_left if i == len(POOLS) - 1 else int(round(gpus * frac / CARDS_PER_NODE)) * CARDS_PER_NODE
        n_left -= n
        for k in range(n):
            rows.append((f"{pool}-n{k // CARDS_PER_NODE:04d}-g{k % CARDS_PER_NODE}", pool,
                         f"{pool}-n{k // CARDS_PER_NODE:04d}", acc))
    return pl.DataFrame(rows, schema=["gpu_id", "pool", "node", "accelerator"], orient="row").with_columns(
        pl.lit(1.0).alias("capacity")
    )


def _allocations(inv: pl.DataFrame, n_rows: int, t0: int, t1: int, owners: list[str], rng: np.random.Generator) -> pl.DataFrame:
    """About n_rows allocation rows: jobs of 1-8 cards on one node, placed on the node's least busy
    cards (few overlaps, some fractional single-card jobs), durations from minutes to days."""
    sizes_of = np.array([1, 1, 1, 2, 4, 8])
    n_jobs = max(1, round(n_rows / sizes_of.mean()))
    cards = inv["gpu_id"].to_numpy()
    n_nodes = len(cards) // CARDS_PER_NODE
    busy = np.full(len(cards), t0, dtype=np.int64)
    starts = np.sort(rng.integers(t0, t1 - 600, n_jobs))
    sizes = rng.choice(sizes_of, n_jobs)
    durs = np.exp(rng.uniform(np.log(600), np.log(3 * 86400), n_jobs)).astype(np.int64)
    nodes = rng.integers(0, n_nodes, n_jobs)
    fractional = rng.random(n_jobs) < 0.15
    shares = rng.choice([0.25, 0.5], n_jobs)
    who = rng.integers(0, len(owners), n_jobs)
    workload = rng.choice(["training", "fine_tuning", "batch_inference", "interactive", "inference"], n_jobs,
                          p=[0.35, 0.15, 0.2, 0.2, 0.1])
    model = rng.integers(0, len(MODELS), n_jobs)
    rows = []
    for j in range(n_jobs):
        base = nodes[j] * CARDS_PER_NODE
        node_busy = busy[base:base + CARDS_PER_NODE]
        picked = np.argsort(node_busy, kind="stable")[: sizes[j]]
        start = max(int(starts[j]), int(node_busy[picked].max()))
        end = min(start + int(durs[j]), t1)
        if end <= start:
            continue
        share = float(shares[j]) if (fractional[j] and sizes[j] == 1) else 1.0
        if share == 1.0:  # a fractional job leaves room for another on the same card
            busy[base + picked] = end
        inference = workload[j] == "inference"
        for k, c in enumerate(picked):
            rows.append((f"j{j:06d}-{k}", cards[base + c], start, end, owners[who[j]], share, workload[j],
                         f"job-{j:06d}", MODELS[model[j]] if inference else None, float(sizes[j])))
    a = pl.DataFrame(rows, schema=["allocation_id", "gpu_id", "start", "end", "owner", "share", "workload", "job_id",
                                   "model", "requested_gpus"], orient="row")
    return a.with_columns(pl.lit("scheduler").alias("source"))


def _queue(n: int, t0: int, t1: int, owners: list[str], rng: np.random.Generator) -> pl.DataFrame:
    submit = rng.integers(t0 - 86400, t1, n)
    wait = np.exp(rng.uniform(np.log(60), np.log(12 * 3600), n)).astype(np.int64)
    start = submit + wait
    never = (rng.random(n) < 0.002) | (start >= t1)
    return pl.DataFrame({
        "job_id": [f"q{i:06d}" for i in range(n)],
        "owner": [owners[i] for i in rng.integers(0, len(owners), n)],
        "pool": [POOLS[i][0] for i in rng.choice(len(POOLS), n, p=[p[2] for p in POOLS])],
        "gpus": rng.choice([1.0, 2.0, 4.0, 8.0, 16.0], n),
        "submit": _iso(submit),
        "start": [None if nv else s for nv, s in zip(never, _iso(start))],
        "reason": rng.choice(["quota", "resources", "priority", "dependency"], n, p=[0.08, 0.12, 0.6, 0.2]),
    })


def _events(n: int, inv: pl.DataFrame, t0: int, t1: int, rng: np.random.Generator) -> pl.DataFrame:
    start = rng.integers(t0, t1, n)
    end = np.minimum(start + np.exp(rng.uniform(np.log(600), np.log(2 * 86400), n)).astype(np.int64), t1 + 86400)
    scope = rng.choice(["gpu_id", "node", "pool"], n, p=[0.7, 0.28, 0.02])
    cards = inv["gpu_id"].to_list()
    nodes = inv["node"].unique(maintain_order=True).to_list()
    pick = rng.integers(0, 1 << 30, n)
    return pl.DataFrame({
        "start": _iso(start),
        "end": _iso(end),
        "kind": rng.choice(EVENT_KINDS, n),
        "gpu_id": [cards[p % len(cards)] if s == "gpu_id" else None for s, p in zip(scope, pick)],
        "node": [nodes[p % len(nodes)] if s == "node" else None for s, p in zip(scope, pick)],
        "pool": [POOLS[p % len(POOLS)][0] if s == "pool" else None for s, p in zip(scope, pick)],
    })


def _costs(inv: pl.DataFrame, t0: int, t1: int, span_h: float) -> pl.DataFrame:
    span = int(span_h * 3600)
    per_pool = inv.group_by("pool").len()
    counts = dict(per_pool.iter_rows())
    rows = []
    for s in range(t0, t1, span):
        e = min(s + span, t1)
        days = (e - s) / 86400
        for pool, *_ in POOLS:
            for cat, per_card_day in POOL_COSTS:
                if pool == RENTED and cat == "depreciation":  # rented cards are paid by the rate
                    continue
                rows.append((cat, round(per_card_day * counts.get(pool, 0) * days, 6), s, e, pool))
        for cat, per_card_day in FLEET_COSTS:
            rows.append((cat, round(per_card_day * inv.height * days, 6), s, e, None))
    f = pl.DataFrame(rows, schema=["category", "amount", "s", "e", "pool"], orient="row")
    return f.with_row_index("i").select(
        pl.format("c{}", pl.col("i")).alias("cost_id"), "category", "amount", pl.lit("USD").alias("currency"),
        pl.Series("start", _iso(f["s"].to_numpy())), pl.Series("end", _iso(f["e"].to_numpy())), "pool",
    )


def _requests(n: int, t0: int, t1: int, owners: list[str], rng: np.random.Generator) -> pl.DataFrame:
    ts = np.sort(rng.integers(t0, t1, n))
    inp = rng.integers(50, 4000, n)
    return pl.DataFrame({
        "request_id": [f"r{i:08d}" for i in range(n)],
        "ts": _iso(ts),
        "owner": [owners[i] for i in rng.integers(0, len(owners), n)],
        "source": "scheduler",
        "model": [MODELS[i] for i in rng.integers(0, len(MODELS), n)],
        "input_tokens": inp,
        "cached_input_tokens": (inp * rng.uniform(0, 0.5, n)).astype(np.int64),
        "output_tokens": rng.integers(10, 1500, n),
    })


def generate_sparse(out_dir: str | Path, gpus: int = 8192, days: int = 45, allocations: int = 30_000,
                    waits: int = 30_000, events: int = 5_000, cost_span_hours: float = 24.0, owners: int = 200,
                    requests: int = 0, seed: int = 7, start: str = "2026-09-01") -> Path:
    """Write the sparse bundle (CSV) into out_dir and return its path."""
    if gpus < CARDS_PER_NODE * len(POOLS):
        raise ValueError(f"--gpus must be at least {CARDS_PER_NODE * len(POOLS)} for the sparse shape")
    if days < 1 or cost_span_hours <= 0 or owners < 1:
        raise ValueError("--days, --cost-span-hours and --owners must be positive")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        for ext in ("csv", "parquet", "jsonl"):
            (out / f"{name}.{ext}").unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    t0 = int(datetime.fromisoformat(start).replace(tzinfo=timezone.utc).timestamp())
    t1 = t0 + days * 86400
    tenants = max(1, owners // 10)
    names = [f"p{i:05d}" for i in range(owners)]
    inv = _inventory(gpus)
    alloc = _allocations(inv, allocations, t0, t1, names, rng)
    tables = {
        "inventory": inv,
        "allocations": alloc.with_columns(pl.Series("start", _iso(alloc["start"].to_numpy())),
                                          pl.Series("end", _iso(alloc["end"].to_numpy()))),
        "owners": pl.DataFrame({"tenant": [f"t{i % tenants:04d}" for i in range(owners)], "project": names}),
        "queue": _queue(waits, t0, t1, names, rng),
        "events": _events(events, inv, t0, t1, rng),
        "costs": _costs(inv, t0, t1, cost_span_hours),
        "rates": pl.DataFrame({"pool": [RENTED], "price_per_gpu_hour": [POOLS[3][3]], "category": ["gpu_rental"]}),
        "quotas": pl.DataFrame({"tenant": [f"t{i:04d}" for i in range(tenants) for _ in POOLS],
                                "pool": [p[0] for _ in range(tenants) for p in POOLS],
                                "gpus": [float(max(8, gpus // tenants // 4))] * (tenants * len(POOLS))}),
    }
    if requests:
        tables["requests"] = _requests(requests, t0, t1, names, rng)
    for name, df in tables.items():
        csv_guard.write_csv(df, out / f"{name}.csv")
    end = datetime.fromtimestamp(t1, tz=timezone.utc)
    (out / "ailedger.toml").write_text(
        "# Config for a generated sparse fleet (no telemetry).\n"
        f"[period]\nstart = {start}T00:00:00Z\nend = {end:%Y-%m-%dT%H:%M:%SZ}\n"
        f'timezone = "{TIMEZONE}"\ncurrency = "USD"\n\n[boundary]\nname = "fully_loaded"\n',
        encoding="utf-8",
    )
    return out


__all__ = ["generate_sparse"]
