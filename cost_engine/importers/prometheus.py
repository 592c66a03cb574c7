"""Prometheus range queries of DCGM exporter metrics -> telemetry, events, allocations, inventory.

Input: the JSON of `/api/v1/query_range` (resultType `matrix`; an instant `vector` counts as
one sample per series), one response per file or one per line. Several files may each hold
one metric: samples of one card at one time are joined across files.

Row numbers in the unmapped list are the position of the series in its file (1-based).

Metrics (values arrive as strings; "NaN" and infinities are missing values, reported):
- DCGM_FI_DEV_GPU_UTIL (0..100) -> util_pct; DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) x 100 when
  GPU_UTIL is absent for that card and time (MIG instances only have the PROF metric).
- DCGM_FI_DEV_POWER_USAGE (W) -> power_w; DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ counter)
  / 1000 -> energy_j; DCGM_FI_DEV_FB_USED (MiB) -> mem_used_mib.
- DCGM_FI_DEV_XID_ERRORS (last XID seen) -> a `degraded_hardware` event of one step at each
  change to a new non-zero XID, except XIDs that are application faults (APPLICATION_XIDS).
- DCGM_FI_DEV_CLOCK_THROTTLE_REASONS / DCGM_FI_DEV_CLOCKS_EVENT_REASONS (bitmask) -> events
  over runs of samples with a hardware slowdown bit (HW_SLOWDOWN_BITS).
- ECC / page retirement / row remapping counters -> an event of one step where they rise;
  DCGM_FI_DEV_RETIRED_PENDING / DCGM_FI_DEV_ROW_REMAP_FAILURE / ..._PENDING -> events while
  non-zero.
- Any other metric is listed unmapped once per metric and file.

Cards: gpu_id = the `UUID` (or `uuid`) label; without one `<Hostname>:gpu<gpu>`. A MIG
instance (labels GPU_I_ID / GPU_I_PROFILE) is its own card: a `MIG_UUID` label when the
exporter has one, else `<UUID>/<GPU_I_ID>`; its capacity is the profile's slices over the
card's (`3g.40gb` -> 3/7; an A30 has 4 slices).

Kubernetes: with the exporter's pod mapping each series carries `pod`, `namespace`,
`container` of the workload on the card (`exported_pod`, ... when Prometheus renamed them;
then the plain labels name the exporter itself and are ignored). Each contiguous run of
samples where a pod is on a card becomes an allocation [first sample, last sample + step)
with owner = namespace, source `kubernetes`, job_id = pod.

Inventory: written only when `ImportOptions.pool` names the pool of these cards (node =
Hostname, accelerator = modelName, capacity from the MIG profile, an extra `index` column).
Samples of a card without utilization cannot be telemetry rows (util_pct is required): they
are reported unmapped, counted per card.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..collector.backend import APPLICATION_XIDS, HW_SLOWDOWN_BITS
from ..config import Config
from . import ImportFailed, ImportOptions, Parsed, from_epoch, load_json_records

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
FB_USED = "DCGM_FI_DEV_FB_USED"
XID = "DCGM_FI_DEV_XID_ERRORS"
CLOCKS = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
# Counters whose rise means the card's memory or hardware degraded.
FAULT_COUNTERS = (
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
)
# Gauges that are non-zero while the card needs attention.
FAULT_STATES = ("DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING")
# metric -> (field, convert): mJ / 1000 (a division, exact for whole joules), fraction x 100.
TELEMETRY_METRICS = {
    UTIL: ("util", lambda x: x),
    GR_ACTIVE: ("gr", lambda x: x * 100.0),
    POWER: ("power_w", lambda x: x),
    ENERGY: ("energy_j", lambda x: x / 1000.0),
    FB_USED: ("mem_used_mib", lambda x: x),
}
KNOWN = set(TELEMETRY_METRICS) | {XID, *CLOCKS, *FAULT_COUNTERS, *FAULT_STATES}


@dataclass
class Series:
    file: str
    row: int
    labels: dict[str, str]
    samples: list[tuple[float, str]] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        return self.labels.get("__name__")

    def label(self, *names: str) -> str | None:
        for n in names:
            v = self.labels.get(n)
            if v not in (None, ""):
                return v
        return None


def read_series(paths: list[Path]) -> list[Series]:
    """Every series of every range-query response in the files."""
    out: list[Series] = []
    for path in paths:
        n = 0
        for _, doc in load_json_records(path):
            docs = doc if isinstance(doc, list) else [doc]
            for d in docs:
                for s in _result(d, path.name):
                    n += 1
                    labels = {str(k): str(v) for k, v in (s.get("metric") or {}).items()}
                    if "values" in s:
                        samples = [(float(t), str(v)) for t, v in s.get("values") or []]
                    elif "value" in s and s["value"]:
                        t, v = s["value"]
                        samples = [(float(t), str(v))]
                    else:
                        samples = []
                    out.append(Series(path.name, n, labels, samples))
    return out


def _result(doc: object, name: str) -> list[dict]:
    if not isinstance(doc, dict):
        raise ImportFailed(f"{name}: not a Prometheus query response (expected a JSON object)")
    if doc.get("status") == "error":
        raise ImportFailed(f"{name}: the query failed: {doc.get('errorType')}: {doc.get('error')}")
    data = doc.get("data", doc)
    if not isinstance(data, dict) or "result" not in data:
        raise ImportFailed(f"{name}: not a Prometheus query response (no data.result)")
    kind = data.get("resultType", "matrix")
    if kind not in ("matrix", "vector"):
        raise ImportFailed(f"{name}: resultType {kind!r}; a range query (matrix) is expected")
    return list(data["result"] or [])


def sample_value(v: str) -> float | None:
    """A sample's value; NaN and infinities are missing."""
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def infer_step(series: list[Series], given: float | None) -> float | None:
    """The query step: given, else the smallest gap between consecutive samples of a series."""
    if given:
        return float(given)
    gaps = [
        b[0] - a[0]
        for s in series
        for a, b in zip(s.samples, s.samples[1:])
        if b[0] - a[0] > 0
    ]
    return min(gaps) if gaps else None


def mig_capacity(profile: str | None, model: str | None) -> float | None:
    """`3g.40gb` -> 3/7 (4 slices on an A30)."""
    m = re.match(r"^(\d+)g\.", profile or "")
    if not m:
        return None
    total = 4 if model and "A30" in model.upper() else 7
    return min(int(m.group(1)) / total, 1.0)


@dataclass
class _Card:
    gpu_id: str
    node: str | None
    model: str | None
    index: str | None
    capacity: float | None


def card_of(s: Series) -> _Card | None:
    uuid = s.label("UUID", "uuid")
    gpu = s.label("gpu")
    host = s.label("Hostname", "hostname", "kubernetes_node", "node")
    model = s.label("modelName")
    gi = s.label("GPU_I_ID")
    profile = s.label("GPU_I_PROFILE")
    base = uuid or (f"{host}:gpu{gpu}" if host is not None and gpu is not None else None)
    if base is None:
        return None
    if gi is not None:
        gpu_id = s.label("MIG_UUID", "mig_uuid") or f"{base}/{gi}"
        return _Card(gpu_id, host, model, f"{gpu}/{gi}" if gpu is not None else None, mig_capacity(profile, model))
    return _Card(base, host, model, gpu, 1.0)


class PrometheusImporter:
    name = "prometheus"
    summary = "Prometheus range-query JSON of DCGM exporter metrics -> telemetry, events, allocations (pods)"

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        series = read_series(paths)
        step = infer_step(series, options.step_s)
        exported = any(s.label("exported_pod", "exported_namespace") for s in series)

        tele: dict[tuple[str, float], dict] = defaultdict(dict)  # (gpu_id, ts) -> field -> value
        origin: dict[str, tuple[str, int]] = {}  # gpu_id -> (file, row) of a series, for reasons
        cards: dict[str, _Card] = {}
        pods: dict[tuple[str, str, str], set[float]] = defaultdict(set)  # (gpu, ns, pod) -> sample times
        pod_origin: dict[tuple[str, str, str], tuple[str, int]] = {}
        unknown: dict[tuple[str, str], list[int]] = defaultdict(list)
        event_series: list[tuple[Series, _Card]] = []

        for s in series:
            name = s.name
            if name is None:
                parsed.skip(s.file, s.row, "series has no __name__ label (export a bare metric, not an expression)")
                continue
            if name not in KNOWN:
                unknown[(s.file, name)].append(s.row)
                continue
            card = card_of(s)
            if card is None:
                parsed.skip(s.file, s.row, f"{name}: series has no UUID label and no Hostname + gpu labels")
                continue
            cards.setdefault(card.gpu_id, card)
            origin.setdefault(card.gpu_id, (s.file, s.row))
            bad = [t for t, v in s.samples if sample_value(v) is None]
            if bad:
                parsed.skip(s.file, s.row,
                            f"{name} on {card.gpu_id}: {len(bad)} of {len(s.samples)} values are NaN or not numbers "
                            f"(first at {_t(bad[0])}); left missing")
            ns = s.label("exported_namespace") if exported else s.label("namespace")
            pod = s.label("exported_pod") if exported else s.label("pod")
            if ns and pod:
                key = (card.gpu_id, ns, pod)
                pods[key].update(t for t, _ in s.samples)
                pod_origin.setdefault(key, (s.file, s.row))
            if name in TELEMETRY_METRICS:
                fld, convert = TELEMETRY_METRICS[name]
                for t, v in s.samples:
                    x = sample_value(v)
                    if x is not None:
                        tele[(card.gpu_id, t)][fld] = convert(x)
            else:
                event_series.append((s, card))

        for (file, name), rows in sorted(unknown.items()):
            parsed.skip(file, rows[0], f"metric {name} is not mapped ({len(rows)} series)")

        self._telemetry(parsed, tele, origin)
        self._allocations(parsed, pods, pod_origin, step)
        self._events(parsed, event_series, step)
        if options.pool:
            for c in sorted(cards.values(), key=lambda c: c.gpu_id):
                f, r = origin[c.gpu_id]
                parsed.add("inventory", f, r, gpu_id=c.gpu_id, pool=options.pool, node=c.node, accelerator=c.model,
                           capacity=c.capacity, index=c.index)
        elif cards:
            parsed.note("inventory not written", f"{len(cards)} cards seen; give a pool (--pool) to write them "
                        "as inventory (with MIG capacities)")
        return parsed

    def _telemetry(self, parsed: Parsed, tele: dict, origin: dict) -> None:
        no_util: dict[str, list[float]] = defaultdict(list)
        for (gpu, t), v in sorted(tele.items()):
            util = v.get("util", v.get("gr"))
            if util is None:
                no_util[gpu].append(t)
                continue
            f, r = origin[gpu]
            parsed.add("telemetry", f, r, ts=from_epoch(t), gpu_id=gpu, util_pct=util, power_w=v.get("power_w"),
                       energy_j=v.get("energy_j"), mem_used_mib=v.get("mem_used_mib"))
        for gpu, times in sorted(no_util.items()):
            f, r = origin[gpu]
            parsed.skip(f, r, f"{gpu}: {len(times)} samples without utilization (first at {_t(times[0])}); "
                        "telemetry needs util_pct, so their power, energy and memory are not imported", "telemetry")

    def _allocations(self, parsed: Parsed, pods: dict, pod_origin: dict, step: float | None) -> None:
        if pods and step is None:
            for key, (f, r) in pod_origin.items():
                parsed.skip(f, r, f"pod {key[1]}/{key[2]} on {key[0]}: one sample only and no step given "
                            "(--step): the allocation's length is unknown", "allocations")
            return
        for (gpu, ns, pod), times in sorted(pods.items()):
            f, r = pod_origin[(gpu, ns, pod)]
            for t0, t1 in runs(sorted(times), step):
                parsed.add("allocations", f, r, allocation_id=f"k8s:{ns}/{pod}:{gpu}:{from_epoch(t0):%Y%m%dT%H%M%SZ}",
                           gpu_id=gpu, start=from_epoch(t0), end=from_epoch(t1 + step), owner=ns,
                           source="kubernetes", job_id=pod)

    def _events(self, parsed: Parsed, event_series: list, step: float | None) -> None:
        for s, card in event_series:
            name = s.name
            vals = [(t, sample_value(v)) for t, v in s.samples]
            vals = [(t, x) for t, x in vals if x is not None]
            width = step or _own_step(vals)
            if width is None:
                parsed.skip(s.file, s.row, f"{name} on {card.gpu_id}: one sample and no step: event length unknown",
                            "events")
                continue
            hits: list[float] = []
            if name == XID:
                prev = 0.0
                for t, x in vals:
                    if x > 0 and x != prev:
                        if int(x) in APPLICATION_XIDS:
                            parsed.skip(s.file, s.row, f"XID {int(x)} on {card.gpu_id} at {_t(t)} is an application "
                                        "fault, not a hardware one: no event", "events")
                        else:
                            hits.append(t)
                    prev = x
            elif name in CLOCKS:
                hits = [t for t, x in vals if int(x) & HW_SLOWDOWN_BITS]
            elif name in FAULT_COUNTERS:
                hits = [b[0] for a, b in zip(vals, vals[1:]) if b[1] > a[1]]
            else:  # FAULT_STATES
                hits = [t for t, x in vals if x > 0]
            for t0, t1 in runs(hits, width):
                parsed.add("events", s.file, s.row, start=from_epoch(t0), end=from_epoch(t1 + width),
                           kind="degraded_hardware", gpu_id=card.gpu_id)


def runs(times: list[float], step: float) -> list[tuple[float, float]]:
    """Contiguous runs (first, last) of sample times at most one step (+50 %) apart."""
    out: list[tuple[float, float]] = []
    for t in times:
        if out and t - out[-1][1] <= step * 1.5:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def _own_step(vals: list[tuple[float, float]]) -> float | None:
    gaps = [b[0] - a[0] for a, b in zip(vals, vals[1:]) if b[0] > a[0]]
    return min(gaps) if gaps else None


def _t(epoch: float) -> str:
    return f"{from_epoch(epoch):%Y-%m-%dT%H:%M:%SZ}"


IMPORTER = PrometheusImporter()
