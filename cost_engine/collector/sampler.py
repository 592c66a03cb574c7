"""Sample every GPU and MIG instance through a GpuBackend; write contract rows to a folder or a store.

Per card and sample: utilization, memory used, power, the total-energy counter (mJ -> J),
clock-event reasons, uncorrected ECC errors, retired pages and remapped rows; XID events
are polled once per sample. A MIG instance is a card of its own (its MIG UUID, capacity =
its slices over the card's), with utilization and memory where NVML gives them; power,
energy and the health counters are card-level and read on the parent only (NVML has no
per-instance power), and the parent's events are written for each of its instances.

Rules:
- A reading NVML does not support (NVML_ERROR_NOT_SUPPORTED) is missing (None), never 0;
  other NVML errors also leave it missing and are noted.
- Telemetry needs util_pct: a card without a utilization reading makes no telemetry row
  (noted once per card), its other readings stay on the Reading.
- A card that reports NVML_ERROR_GPU_IS_LOST is lost for the rest of the run: no more
  readings, and a `degraded_hardware` event for every sample interval from then on.
- An energy counter that goes backwards is written as read (the engine treats a negative
  delta as a counter reset and uses power x time there) and noted.
- degraded_hardware events of one sample interval [ts, ts + interval): a hardware clock
  slowdown bit (backend.HW_SLOWDOWN_BITS), a rise of uncorrected ECC errors, retired pages
  or uncorrectable remapped rows, a pending or failed row remap, a non-application XID.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from .. import csv_guard
from ..contract import TABLES, make_frame
from .backend import (
    APPLICATION_XIDS,
    HW_SLOWDOWN_BITS,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    CollectorError,
    GpuBackend,
    mig_slices_from_name,
    mig_total_slices,
    nvml_code,
)

UTC = timezone.utc
MIB = 1024 * 1024
# Extra telemetry column the collector writes beside the contract's (bundles allow extras).
TELEMETRY_EXTRAS = ("clock_event_reasons",)
INVENTORY_EXTRAS = ("index",)


class _Lost(Exception):
    """Raised inside a sample when the card reports NVML_ERROR_GPU_IS_LOST."""


@dataclass
class Card:
    gpu_id: str  # NVML UUID (GPU-... or MIG-...)
    handle: Any
    name: str
    index: str  # NVML index; `<card index>/<GPU instance id>` for MIG
    capacity: float
    parent: Card | None = None  # the physical card of a MIG instance
    instances: list[Card] = field(default_factory=list)
    lost: bool = False

    @property
    def is_mig(self) -> bool:
        return self.parent is not None


@dataclass
class Reading:
    """One card at one sample. None = not supported / not readable (never 0 for unknown)."""

    ts: datetime
    gpu_id: str
    util_pct: float | None = None
    mem_used_mib: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    clock_event_reasons: int | None = None
    ecc_uncorrected: int | None = None
    retired_pages: int | None = None
    remapped_rows: tuple[int, int, bool, bool] | None = None
    lost: bool = False
    unsupported: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class Batch:
    """What one sample produced: contract rows (with extra columns) and notes."""

    ts: datetime
    readings: list[Reading]
    telemetry: list[dict]
    events: list[dict]
    inventory: list[dict]
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, pl.DataFrame]:
        """Canonical frames (contract columns only) of the non-empty tables."""
        out = {}
        for table, rows in (("telemetry", self.telemetry), ("events", self.events), ("inventory", self.inventory)):
            if rows:
                names = {c.name for c in TABLES[table]}
                out[table] = make_frame(table, [{k: v for k, v in r.items() if k in names} for r in rows])
        return out


class Sampler:
    """Reads every card through a backend. `open()` first, then `sample()` per tick, `close()`."""

    def __init__(
        self,
        backend: GpuBackend,
        *,
        interval_s: float = 10.0,
        node: str | None = None,
        pool: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.interval = timedelta(seconds=interval_s)
        self.node = node or socket.gethostname()
        self.pool = pool or self.node
        self.clock = clock
        self.cards: list[Card] = []
        self._opened = False
        self._inventory_sent = False
        self._prev: dict[str, dict[str, Any]] = {}  # card -> last counters (energy, ecc, ...)
        self._noted: set[tuple[str, str]] = set()
        self.open_notes: list[str] = []

    # ---------------------------------------------------------------- lifecycle

    def open(self) -> list[dict]:
        """Start the backend and list the cards; returns their inventory rows."""
        self.backend.init()  # raises CollectorError without a driver
        self._opened = True
        try:
            n = self.backend.device_count()
        except Exception as exc:
            if nvml_code(exc) is None:
                raise
            raise CollectorError(f"NVML lists no devices: {exc}") from None
        for i in range(n):
            try:
                self.cards.append(self._card(i))
            except Exception as exc:
                if nvml_code(exc) is None:
                    raise
                self.open_notes.append(f"card {i} skipped: {exc}")
        if not self.cards:
            raise CollectorError("no GPU could be read (NVML reports %d devices)" % n)
        physical = [c.handle for c in self.cards]
        try:
            self.backend.watch_xids(physical)
        except Exception as exc:
            if nvml_code(exc) is None:
                raise
            self.open_notes.append(f"XID events not available: {exc}")
        return self.inventory_rows()

    def _card(self, index: int) -> Card:
        b = self.backend
        h = b.handle(index)
        card = Card(gpu_id=b.uuid(h), handle=h, name=b.name(h), index=str(index), capacity=1.0)
        if b.mig_enabled(h):
            total = mig_total_slices(card.name)
            for mh in b.mig_devices(h):
                gi = b.gpu_instance_id(mh)
                name = _try(lambda: b.name(mh)) or card.name
                slices = _try(lambda: int(b.attributes(mh).gpuInstanceSliceCount)) or mig_slices_from_name(name)
                if not slices:
                    self.open_notes.append(f"MIG instance {gi} of {card.gpu_id}: slice count unknown, skipped")
                    continue
                card.instances.append(Card(gpu_id=b.uuid(mh), handle=mh, name=name, index=f"{index}/{gi}",
                                           capacity=min(slices / total, 1.0), parent=card))
        return card

    def close(self) -> None:
        if self._opened:
            self.backend.shutdown()
            self._opened = False

    def __enter__(self) -> Sampler:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- inventory

    def inventory_rows(self) -> list[dict]:
        rows = []
        for c in self.cards:
            for unit in (c.instances or [c]):
                rows.append({"gpu_id": unit.gpu_id, "pool": self.pool, "node": self.node,
                             "accelerator": unit.name, "capacity": unit.capacity, "index": unit.index,
                             "parent_gpu_id": unit.parent.gpu_id if unit.parent is not None else None})
        return rows

    # ---------------------------------------------------------------- sampling

    def sample(self, ts: datetime | None = None) -> Batch:
        if not self._opened:
            raise CollectorError("sampler not opened")
        ts = ts or _now(self.clock)
        batch = Batch(ts=ts, readings=[], telemetry=[], events=[], inventory=[])
        if not self._inventory_sent:
            batch.inventory = self.inventory_rows()
            batch.notes.extend(self.open_notes)
            self._inventory_sent = True
        xids = self._poll_xids(batch)
        for card in self.cards:
            self._sample_card(card, ts, batch, xids.get(card.gpu_id, []))
        return batch

    def _poll_xids(self, batch: Batch) -> dict[str, list[int]]:
        try:
            events = self.backend.poll_xids()
        except Exception as exc:
            if nvml_code(exc) is None:
                raise
            batch.notes.append(f"XID poll failed: {exc}")
            return {}
        out: dict[str, list[int]] = {}
        for uuid, xid in events:
            out.setdefault(uuid, []).append(int(xid))
        return out

    def _sample_card(self, card: Card, ts: datetime, batch: Batch, xids: list[int]) -> None:
        units = card.instances or [card]
        if card.lost:
            self._degraded(batch, units, ts)
            batch.readings.extend(Reading(ts=ts, gpu_id=u.gpu_id, lost=True) for u in units)
            return
        try:
            health = self._read_card(card, ts)  # card-level (parent) readings
            unit_readings = [self._read_unit(u, ts, health if not card.instances else None) for u in units]
        except _Lost:
            card.lost = True
            batch.notes.append(f"{card.gpu_id}: GPU is lost (NVML_ERROR_GPU_IS_LOST); degraded_hardware from {_iso(ts)}")
            self._degraded(batch, units, ts)
            batch.readings.extend(Reading(ts=ts, gpu_id=u.gpu_id, lost=True) for u in units)
            return
        batch.readings.extend(unit_readings)
        for r in unit_readings:
            if r.util_pct is None:
                self._note_once(batch, r.gpu_id, "util", f"{r.gpu_id}: no utilization reading "
                                f"({'not supported' if 'util_pct' in r.unsupported else 'error'}); "
                                "no telemetry row (util_pct is required)")
                continue
            batch.telemetry.append({
                "ts": ts, "gpu_id": r.gpu_id, "util_pct": r.util_pct, "power_w": r.power_w,
                "energy_j": r.energy_j, "mem_used_mib": r.mem_used_mib,
                "clock_event_reasons": r.clock_event_reasons,
            })
        for r in unit_readings:
            for what in r.errors:
                self._note_once(batch, r.gpu_id, what, f"{r.gpu_id}: {what}")
        if self._unhealthy(card, health, xids, batch):
            self._degraded(batch, units, ts)

    def _read_card(self, card: Card, ts: datetime) -> Reading:
        """Card-level readings on the physical card: power, energy, clocks, ECC, pages, rows."""
        b, h = self.backend, card.handle
        r = Reading(ts=ts, gpu_id=card.gpu_id)
        mw = self._get(r, "power_w", lambda: b.power_mw(h))
        r.power_w = None if mw is None else mw / 1000.0
        mj = self._get(r, "energy_j", lambda: b.energy_mj(h))
        r.energy_j = None if mj is None else mj / 1000.0
        r.clock_event_reasons = self._get(r, "clock_event_reasons", lambda: b.clock_event_reasons(h))
        r.ecc_uncorrected = self._get(r, "ecc_uncorrected", lambda: b.ecc_uncorrected(h))
        r.retired_pages = self._get(r, "retired_pages", lambda: b.retired_pages(h))
        r.remapped_rows = self._get(r, "remapped_rows", lambda: b.remapped_rows(h))
        return r

    def _read_unit(self, unit: Card, ts: datetime, card_reading: Reading | None) -> Reading:
        """A whole card (with its card-level readings) or a MIG instance (util and memory only)."""
        b, h = self.backend, unit.handle
        r = card_reading if card_reading is not None else Reading(ts=ts, gpu_id=unit.gpu_id)
        util = self._get(r, "util_pct", lambda: b.utilization(h))
        r.util_pct = None if util is None else float(util.gpu)
        mem = self._get(r, "mem_used_mib", lambda: b.memory(h))
        r.mem_used_mib = None if mem is None else mem.used / MIB
        return r

    def _get(self, r: Reading, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:
            code = nvml_code(exc)
            if code is None:
                raise
            if code == NVML_ERROR_GPU_IS_LOST:
                raise _Lost() from None
            if code == NVML_ERROR_NOT_SUPPORTED:
                r.unsupported.append(what)
            else:
                r.errors.append(f"{what} not readable: {exc}")
            return None

    def _unhealthy(self, card: Card, r: Reading, xids: list[int], batch: Batch) -> bool:
        """Card-level health now vs the previous sample; notes the energy counter going back."""
        prev = self._prev.get(card.gpu_id, {})
        bad = False
        if r.clock_event_reasons is not None and r.clock_event_reasons & HW_SLOWDOWN_BITS:
            bad = True
        for key in ("ecc_uncorrected", "retired_pages"):
            now = getattr(r, key)
            if now is not None and prev.get(key) is not None and now > prev[key]:
                bad = True
        if r.remapped_rows is not None:
            _corr, unc, pending, failure = r.remapped_rows
            if pending or failure or (prev.get("remap_unc") is not None and unc > prev["remap_unc"]):
                bad = True
        hardware = [x for x in xids if x not in APPLICATION_XIDS]
        if hardware:
            bad = True
            batch.notes.append(f"{card.gpu_id}: XID {', '.join(map(str, hardware))}")
        if r.energy_j is not None and prev.get("energy_j") is not None and r.energy_j < prev["energy_j"]:
            batch.notes.append(f"{card.gpu_id}: energy counter went backwards ({prev['energy_j']:g} J -> "
                               f"{r.energy_j:g} J); the engine counts that interval as power x time")
        self._prev[card.gpu_id] = {
            "ecc_uncorrected": r.ecc_uncorrected if r.ecc_uncorrected is not None else prev.get("ecc_uncorrected"),
            "retired_pages": r.retired_pages if r.retired_pages is not None else prev.get("retired_pages"),
            "remap_unc": r.remapped_rows[1] if r.remapped_rows is not None else prev.get("remap_unc"),
            "energy_j": r.energy_j if r.energy_j is not None else prev.get("energy_j"),
        }
        return bad

    def _degraded(self, batch: Batch, units: list[Card], ts: datetime) -> None:
        for u in units:
            batch.events.append({"start": ts, "end": ts + self.interval, "kind": "degraded_hardware",
                                 "gpu_id": u.gpu_id})

    def _note_once(self, batch: Batch, gpu: str, what: str, text: str) -> None:
        if (gpu, what) not in self._noted:
            self._noted.add((gpu, what))
            batch.notes.append(text)


# -------------------------------------------------------------------------------- writers


class BundleWriter:
    """Appends rows to a bundle-shaped folder: `<table>.jsonl` (default) or `<table>.csv`.

    Telemetry and events are appended; the inventory is rewritten (merged by gpu_id).
    With `rotate_bytes`, a CSV/JSONL file that reached that size is moved to
    `rotated/<table>-<UTC time>.<ext>` first (rotated parts are an archive outside the bundle:
    for long runs prefer a store, `--db`).
    """

    COLUMNS = {
        "telemetry": [c.name for c in TABLES["telemetry"]] + list(TELEMETRY_EXTRAS),
        "events": [c.name for c in TABLES["events"]],
        "inventory": [c.name for c in TABLES["inventory"]] + list(INVENTORY_EXTRAS),
    }

    def __init__(self, out: str | Path, fmt: str = "jsonl", rotate_bytes: int | None = None) -> None:
        if fmt not in ("jsonl", "csv"):
            raise ValueError(f"format {fmt!r}: jsonl or csv")
        self.out = Path(out)
        self.fmt = fmt
        self.rotate_bytes = rotate_bytes
        self.out.mkdir(parents=True, exist_ok=True)
        for table in self.COLUMNS:  # one file per table: the other format's copy would clash
            other = self.out / f"{table}.{'csv' if fmt == 'jsonl' else 'jsonl'}"
            if other.exists():
                raise CollectorError(f"{other} exists: write this folder as {other.suffix[1:]}, or use another folder")

    def path(self, table: str) -> Path:
        return self.out / f"{table}.{self.fmt}"

    def write(self, batch: Batch) -> None:
        for table, rows in (("telemetry", batch.telemetry), ("events", batch.events)):
            if rows:
                self._append(table, rows)
        if batch.inventory:
            self._merge_inventory(batch.inventory)

    def _append(self, table: str, rows: list[dict]) -> None:
        path = self.path(table)
        if self.rotate_bytes and path.exists() and path.stat().st_size >= self.rotate_bytes:
            rotated = self.out / "rotated"
            rotated.mkdir(exist_ok=True)
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            path.rename(rotated / f"{table}-{stamp}.{self.fmt}")
        cols = self.COLUMNS[table]
        new = not path.exists() or path.stat().st_size == 0
        with path.open("a", encoding="utf-8", newline="") as fh:
            if self.fmt == "jsonl":
                for r in rows:
                    fh.write(json.dumps({c: _plain(r.get(c)) for c in cols if r.get(c) is not None}) + "\n")
            else:
                w = csv.writer(fh)
                if new:
                    w.writerow(cols)
                for r in rows:
                    w.writerow(["" if r.get(c) is None else csv_guard.guard_cell(_plain(r.get(c))) for c in cols])
            fh.flush()
            os.fsync(fh.fileno())

    def _merge_inventory(self, rows: list[dict]) -> None:
        path = self.path("inventory")
        cols = self.COLUMNS["inventory"]
        merged: dict[str, dict] = {}
        if path.exists():
            if self.fmt == "jsonl":
                for line in path.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        r = json.loads(line)
                        merged[str(r.get("gpu_id"))] = r
            else:
                with path.open(encoding="utf-8", newline="") as fh:
                    for r in csv.DictReader(fh):
                        r = {k: csv_guard.unguard_cell(v) if isinstance(v, str) else v for k, v in r.items()}
                        merged[str(r.get("gpu_id"))] = r
        for r in rows:
            merged[str(r["gpu_id"])] = {c: _plain(r.get(c)) for c in cols}
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            if self.fmt == "jsonl":
                for r in merged.values():
                    fh.write(json.dumps({c: r.get(c) for c in cols if r.get(c) not in (None, "")}) + "\n")
            else:
                w = csv.writer(fh)
                w.writerow(cols)
                for r in merged.values():
                    w.writerow(["" if r.get(c) is None else csv_guard.guard_cell(r.get(c)) for c in cols])
        tmp.replace(path)


class StoreWriter:
    """Ingests each batch into an ailedger DuckDB store (one transaction per batch)."""

    def __init__(self, db: str | Path) -> None:
        self.db = Path(db)

    def write(self, batch: Batch) -> None:
        from .. import store
        from ..bundle import Bundle

        frames = batch.frames()
        if frames:
            store.ingest(self.db, Bundle.from_frames(frames), source=f"collector@{_iso(batch.ts)}")


# -------------------------------------------------------------------------------- loop


@dataclass
class RunSummary:
    samples: int = 0
    telemetry_rows: int = 0
    event_rows: int = 0
    notes: list[str] = field(default_factory=list)


def run(
    sampler: Sampler,
    writer: BundleWriter | StoreWriter,
    *,
    count: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_batch: Callable[[Batch], None] | None = None,
) -> RunSummary:
    """Sample every `sampler.interval` until `count` samples (or Ctrl-C); returns what was written."""
    summary = RunSummary()
    interval = sampler.interval.total_seconds()
    if not sampler._opened:
        sampler.open()
    try:
        start = sampler.clock()
        while count is None or summary.samples < count:
            batch = sampler.sample()
            writer.write(batch)
            summary.samples += 1
            summary.telemetry_rows += len(batch.telemetry)
            summary.event_rows += len(batch.events)
            summary.notes.extend(batch.notes)
            if on_batch is not None:
                on_batch(batch)
            if count is not None and summary.samples >= count:
                break
            # Next tick on the grid start + k * interval, so sampling does not drift.
            wait = start + summary.samples * interval - sampler.clock()
            if wait > 0:
                sleep(wait)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()
    return summary


# -------------------------------------------------------------------------------- helpers


def _now(clock: Callable[[], float]) -> datetime:
    t = clock()
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=round(t * 1000))


def _iso(ts: datetime) -> str:
    s = ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        s += f".{ts.microsecond:06d}".rstrip("0")
    return s + "Z"


def _plain(v: Any) -> Any:
    if isinstance(v, datetime):
        return _iso(v)
    return v


def _try(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as exc:
        if nvml_code(exc) is None:
            raise
        return None
