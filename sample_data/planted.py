"""A two-month sample bundle with changes planted in the second month, so `ailedger diff` has a story to tell.

    python sample_data/generate.py --out DIR --two-months [--start 2026-10-01] [--gpus 24] [--seed 7] ...

The fleet of generate.py is generated over two whole calendar months (the month of --start and
the next one); then, from the first instant of the second month:

- rlhf's generation traffic (gateway key `key-rlhf-gen` on llama-3.1-70b, per-request rows and
  hourly buckets) asks for twice the output tokens per request, with the same requests (seed
  000's story: the cost rose because outputs doubled, not because more was asked);
- the llama service scales out to serve it: two more rented A100 cards (pool `a100-infer`, node
  `a100-infer-burst-01`, in service from the second month) each hold a llama pod, with
  telemetry like the other service cards;
- electricity costs 40 % more (every tariff band of the second month);
- a new tenant `partner` (project `partner-pilot`, gateway key `key-partner`) calls mistral-7b
  (interactive calls in business hours and an hourly-bucketed batch).

The config's time zone is UTC, so the months are UTC months. `planted.json` beside the tables
names every change (ids, times, factors); sample_data/README.md shows what `ailedger diff`
makes of it.
"""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from cost_engine import csv_guard

TS_FMT = "%Y-%m-%dT%H:%M:%SZ"
OUTPUT_KEY, OUTPUT_MODEL, OUTPUT_FACTOR = "key-rlhf-gen", "llama-3.1-70b", 2
TARIFF_FACTOR = 1.4
BURST_NODE, BURST_CARDS, BURST_ACCELERATOR = "a100-infer-burst-01", 2, "A100-SXM-80GB"
PARTNER = {"tenant": "partner", "project": "partner-pilot", "display_name": "Partner pilot",
           "cost_center": "CC-7100", "key": "key-partner", "model": "mistral-7b", "requests_per_day": 400,
           "batch_output_tokens_per_s": 250}


def month_bounds(start: str) -> tuple[date, date, date]:
    """First day of the month of `start`, of the next month, and of the month after."""
    d = date.fromisoformat(start)
    first = d.replace(day=1)
    second = date(first.year + (first.month == 12), first.month % 12 + 1, 1)
    after = date(second.year + (second.month == 12), second.month % 12 + 1, 1)
    return first, second, after


def generate_two_months(out_dir: str | Path, gpus: int = 24, seed: int = 7, start: str = "2026-10-01",
                        fmt: str = "csv", telemetry_interval_s: int = 60, telemetry_fmt: str | None = None,
                        requests_fmt: str | None = None) -> Path:
    """Write the two-month bundle into out_dir (see the module docstring) and return its path."""
    from sample_data.generate import generate_bundle

    first, second, after = month_bounds(start)
    out = generate_bundle(out_dir, gpus=gpus, days=(after - first).days, seed=seed, start=first.isoformat(), fmt=fmt,
                          telemetry_interval_s=telemetry_interval_s, telemetry_fmt=telemetry_fmt,
                          requests_fmt=requests_fmt)
    split = datetime(second.year, second.month, second.day, tzinfo=timezone.utc)
    end = datetime(after.year, after.month, after.day, tzinfo=timezone.utc)
    manifest = plant(out, split, end, seed, telemetry_interval_s)
    # Months are cut in the config's time zone: UTC, so they match the generated days.
    cfg = out / "ailedger.toml"
    cfg.write_text(cfg.read_text(encoding="utf-8").replace('timezone = "Europe/Berlin"', 'timezone = "UTC"'),
                   encoding="utf-8")
    manifest.update(base=f"{first:%Y-%m}", period=f"{second:%Y-%m}", split=split.strftime(TS_FMT))
    (out / "planted.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


# ---------------------------------------------------------------------------- table files


def _path(folder: Path, table: str) -> Path:
    for ext in ("csv", "parquet"):
        p = folder / f"{table}.{ext}"
        if p.exists():
            return p
    raise FileNotFoundError(f"{folder}: no {table}.csv or {table}.parquet")


def _read(path: Path) -> pl.DataFrame:
    """A table as typed columns; from CSV timestamps stay the text they were (written back as is)."""
    return pl.read_csv(path, infer_schema_length=None) if path.suffix == ".csv" else pl.read_parquet(path)


def _write(frame: pl.DataFrame, path: Path) -> None:
    if path.suffix == ".csv":
        csv_guard.write_csv(frame, path, datetime_format=TS_FMT)
    else:
        frame.write_parquet(path, compression="zstd")


def _like(new: pl.DataFrame, old: pl.DataFrame) -> pl.DataFrame:
    """`new` with `old`'s columns and types (timestamps as text where `old` holds text), missing
    columns empty."""
    cols = []
    for name, dtype in old.schema.items():
        c = new[name] if name in new.columns else pl.Series(name, [None] * new.height)
        if isinstance(c.dtype, pl.Datetime) and dtype == pl.String:
            c = c.dt.strftime(TS_FMT)
        cols.append(c.cast(dtype))
    return pl.DataFrame(cols)


def _append(folder: Path, table: str, rows: pl.DataFrame) -> None:
    path = _path(folder, table)
    old = _read(path)
    _write(pl.concat([old, _like(rows, old)]), path)


def _after(split: datetime, frame: pl.DataFrame, col: str = "ts") -> pl.Expr:
    """At or after the split, whether `col` holds instants or (read from CSV) ISO text."""
    at = split.strftime(TS_FMT) if frame.schema[col] == pl.String else split
    return pl.col(col) >= at


# ------------------------------------------------------------------------------ the changes


def plant(folder: Path, split: datetime, end: datetime, seed: int, interval_s: int) -> dict:
    """Apply the planted changes to the bundle in `folder`; returns what was planted."""
    return {"changes": [
        _double_output(folder, split),
        _scale_out(folder, split, end, seed, interval_s),
        _tariff(folder, split),
        _new_tenant(folder, split, end, seed),
    ]}


def _double_output(folder: Path, split: datetime) -> dict:
    path = _path(folder, "requests")
    r = _read(path)
    hit = (pl.col("owner") == OUTPUT_KEY) & (pl.col("model") == OUTPUT_MODEL) & _after(split, r)
    n = int(r.select(hit.sum()).item())
    decode = pl.col("decode_ms").cast(pl.Float64)
    r = r.with_columns(
        pl.when(hit).then(pl.col("output_tokens") * OUTPUT_FACTOR).otherwise(pl.col("output_tokens"))
        .cast(r.schema["output_tokens"]).alias("output_tokens"),
        # Twice the tokens take twice the decode time, and the request that much longer.
        pl.when(hit).then((decode * OUTPUT_FACTOR).round(1)).otherwise(decode).cast(r.schema["decode_ms"])
        .alias("decode_ms"),
        pl.when(hit).then((pl.col("latency_ms").cast(pl.Float64) + decode * (OUTPUT_FACTOR - 1)).round(1))
        .otherwise(pl.col("latency_ms")).cast(r.schema["latency_ms"]).alias("latency_ms"),
    )
    _write(r, path)
    return {"what": "output_tokens_per_request", "key": OUTPUT_KEY, "project": "rlhf", "model": OUTPUT_MODEL,
            "factor": OUTPUT_FACTOR, "rows": n,
            "note": "output_tokens (and decode_ms, latency_ms) of these rows multiplied; requests unchanged"}


def _burst_id(i: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://ailedger.example/sample/gpu/{BURST_NODE}/{i}"))


def _scale_out(folder: Path, split: datetime, end: datetime, seed: int, interval_s: int) -> dict:
    cards = [_burst_id(i) for i in range(BURST_CARDS)]
    ids = [f"alloc-burst-{i + 1:02d}" for i in range(BURST_CARDS)]
    _append(folder, "inventory", pl.DataFrame({
        "gpu_id": cards, "pool": ["a100-infer"] * BURST_CARDS, "node": [BURST_NODE] * BURST_CARDS,
        "accelerator": [BURST_ACCELERATOR] * BURST_CARDS, "capacity": [1.0] * BURST_CARDS,
        "in_service_start": [split] * BURST_CARDS,
    }))
    _append(folder, "allocations", pl.DataFrame({
        "allocation_id": ids, "gpu_id": cards, "start": [split] * BURST_CARDS, "end": [end] * BURST_CARDS,
        "owner": ["ns-inference"] * BURST_CARDS, "source": ["kubernetes"] * BURST_CARDS, "share": [1.0] * BURST_CARDS,
        "workload": ["inference"] * BURST_CARDS, "job_id": [f"svc-{OUTPUT_MODEL}"] * BURST_CARDS,
        "model": [OUTPUT_MODEL] * BURST_CARDS,
    }))
    rows = _append_telemetry(folder, cards, split, end, seed, interval_s)
    return {"what": "scale_out", "pool": "a100-infer", "node": BURST_NODE, "cards": cards, "allocations": ids,
            "model": OUTPUT_MODEL, "telemetry_rows": rows,
            "note": "new cards in service from the split, each holding a llama pod until the end"}


def _append_telemetry(folder: Path, cards: list[str], split: datetime, end: datetime, seed: int,
                      interval_s: int) -> int:
    """Service-card telemetry for the new cards: a busy diurnal load, board power that follows it,
    and a lifetime energy counter (the integral of the power)."""
    rng = np.random.default_rng([seed, 919])
    t = np.arange(int(split.timestamp()), int(end.timestamp()), interval_s, dtype=np.int64)
    hod = (t % 86400) / 3600
    parts = []
    for gpu in cards:
        util = np.clip(72 + 18 * np.cos(2 * np.pi * (hod - 14) / 24) + rng.normal(0, 5, t.size), 0, 100)
        power = np.round(62 + (392 - 62) * util / 100 + rng.normal(0, 4, t.size), 1)
        energy = float(rng.uniform(2e9, 6e10)) + np.concatenate([[0.0], np.cumsum(power[:-1] * interval_s)])
        parts.append(pl.DataFrame({
            "ts": pl.Series(t * 1_000_000).cast(pl.Datetime("us", "UTC")), "gpu_id": [gpu] * t.size,
            "util_pct": np.round(util, 1), "power_w": power, "energy_j": np.round(energy, 1),
            "mem_used_mib": np.round(np.full(t.size, 71_000.0) + rng.normal(0, 300, t.size), 0),
        }))
    new = pl.concat(parts)
    path = _path(folder, "telemetry")
    if path.suffix == ".csv":  # append the text: the file can be large
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(csv_guard.write_csv(new, None, include_header=False, datetime_format=TS_FMT))
    else:
        _write(pl.concat([pl.read_parquet(path), new.cast(pl.read_parquet_schema(path))]), path)
    return new.height


def _tariff(folder: Path, split: datetime) -> dict:
    path = _path(folder, "tariffs")
    t = _read(path)
    hit = _after(split, t, "start")
    n = int(t.select(hit.sum()).item())
    t = t.with_columns(pl.when(hit).then((pl.col("price_per_kwh") * TARIFF_FACTOR).round(4))
                       .otherwise(pl.col("price_per_kwh")).alias("price_per_kwh"))
    _write(t, path)
    return {"what": "electricity_price", "factor": TARIFF_FACTOR, "tariff_rows": n,
            "note": "price_per_kwh of every tariff band from the split on multiplied"}


def _new_tenant(folder: Path, split: datetime, end: datetime, seed: int) -> dict:
    p = PARTNER
    _append(folder, "owners", pl.DataFrame([{k: p[k] for k in ("tenant", "project", "display_name", "cost_center")}]))
    _append(folder, "aliases", pl.DataFrame([{"source": "gateway", "key": p["key"], "project": p["project"]}]))
    rng = np.random.default_rng([seed, 929])
    days = int((end - split).total_seconds() // 86400)
    n = p["requests_per_day"] * days
    # Interactive calls in business hours (08:00-18:00 UTC), spread evenly over the days.
    t = (int(split.timestamp()) + np.repeat(np.arange(days), p["requests_per_day"]) * 86400
         + rng.integers(8 * 3600, 18 * 3600, n))
    t.sort()
    prompt = np.maximum(1, np.round(650 * rng.lognormal(0, 0.5, n))).astype(np.int64)
    cached = ((np.where(rng.random(n) < 0.3, np.round(prompt * 0.5), 0) // 16) * 16).astype(np.int64)
    out = np.clip(np.round(340 * rng.lognormal(0, 0.5, n)), 1, 4096).astype(np.int64)
    prefill = np.round(12 + (prompt - cached) / 18000 * 1000, 1)
    decode = np.round(out * 9.5, 1)
    ttft = np.round(prefill + rng.exponential(40, n), 1)
    calls = pl.DataFrame({
        "request_id": [f"req-partner-{i + 1:07d}" for i in range(n)],
        "ts": pl.Series(t * 1_000_000).cast(pl.Datetime("us", "UTC")),
        "owner": [p["key"]] * n, "source": ["gateway"] * n, "model": [p["model"]] * n,
        "input_tokens": prompt - cached, "cached_input_tokens": cached, "output_tokens": out,
        "status": ["ok"] * n, "ttft_ms": ttft, "latency_ms": np.round(ttft + decode + 5, 1),
        "prefill_ms": prefill, "decode_ms": decode, "requests": np.ones(n, dtype=np.int64),
        "attempt": np.ones(n, dtype=np.int64),
    })
    # And a document-processing batch, reported as hourly usage buckets round the clock.
    hours = np.arange(days * 24, dtype=np.int64)
    start = int(split.timestamp()) + hours * 3600
    b_out = np.round(p["batch_output_tokens_per_s"] * 3600 * rng.lognormal(0, 0.1, hours.size)).astype(np.int64)
    b_in = np.round(b_out * 2.5).astype(np.int64)
    b_cached = np.round(b_in * 0.2).astype(np.int64)
    buckets = pl.DataFrame({
        "request_id": [f"bkt-partner-{h:05d}" for h in hours],
        "ts": pl.Series(start * 1_000_000).cast(pl.Datetime("us", "UTC")),
        "owner": [p["key"]] * hours.size, "source": ["gateway"] * hours.size, "model": [p["model"]] * hours.size,
        "input_tokens": b_in - b_cached, "cached_input_tokens": b_cached, "output_tokens": b_out,
        "status": ["ok"] * hours.size, "requests": np.maximum(1, b_out // 350),
        "end": pl.Series((start + 3600) * 1_000_000).cast(pl.Datetime("us", "UTC")),
    })
    _append(folder, "requests", pl.concat([calls, buckets], how="diagonal"))
    return {"what": "new_tenant", "tenant": p["tenant"], "project": p["project"], "key": p["key"],
            "model": p["model"], "requests": n, "usage_buckets": int(hours.size),
            "note": "owners and aliases rows added; calls and hourly usage buckets from the split on"}
