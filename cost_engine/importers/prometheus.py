"""Prometheus data of GPU nodes -> telemetry, events, allocations, inventory.

Input, any mix: `/api/v1/query_range` (or instant query) JSON, one response per file or line;
a raw `/metrics` scrape of the DCGM exporter or kube-state-metrics (Prometheus text format,
samples without a timestamp take `ImportOptions.at`); an OpenMetrics file (`# EOF`, timestamps
in seconds, what `promtool tsdb create-blocks-from openmetrics` reads). Or, through
`promapi.fetch_series`, the live HTTP API with the queries in `PrometheusImporter.queries`.
Samples of one card at one time are joined across files.

Row numbers in the unmapped list are the position of the series in its JSON file (1-based), or
the line of its first sample in a text file.

DCGM metrics (values arrive as strings; "NaN" and infinities are missing values, reported):
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
- Other DCGM fields, kube-state-metrics series not used, exporters' own metrics (go_, process_,
  promhttp_) and vLLM metrics are ignored on purpose and listed once; any other metric is
  unmapped, once per metric and file.

Cards: gpu_id = the `UUID` (or `uuid`) label; without one `<Hostname>:gpu<gpu>`. A MIG
instance (labels GPU_I_ID / GPU_I_PROFILE) is its own card: a `MIG_UUID` label when the
exporter has one, else `<UUID>/<GPU_I_ID>`; its capacity is the profile's slices over the
card's (`3g.40gb` -> 3/7; an A30 has 4 slices), and its inventory row names the physical card in
`parent_gpu_id` (the UUID, or `<Hostname>:gpu<gpu>`). DCGM reports the device's power and energy
counter on every instance of a MIG-enabled card (the whole card's readings, the same on each):
they are not taken for an instance, which would count the card's energy once per instance;
the instances' energy is unknown (NVML has no per-instance power) and a note says so.

Who holds a card (`promseries.workload`): `exported_pod`/`exported_namespace` per series when
present (Prometheus renamed the workload's labels), else plain `pod`/`namespace` unless they
name the exporter's own pod. Each contiguous run of samples where a pod is on a card becomes
an allocation [first sample, last sample + step) with owner = namespace (or the pod label
named by `owner_label`, from kube_pod_labels), source `kubernetes`, job_id = pod. A card with
no workload label is capacity without an owner: no allocation, and the summary says how many.
kube-state-metrics GPU requests (see kube.py) add allocations for pods DCGM did not place.

Inventory: written when a pool is known (`ImportOptions.pool`, or the node label named by
`pool_label`): node = Hostname, accelerator = modelName (or the node's nvidia.com/gpu.product),
capacity from the MIG profile, an extra `index` column. Samples of a card without utilization
cannot be telemetry rows (util_pct is required): they are reported unmapped, counted per card.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..collector.backend import APPLICATION_XIDS, HW_SLOWDOWN_BITS
from ..config import Config
from . import ImportOptions, Parsed, from_epoch
from .kube import PRODUCT_LABEL, kube_allocations, read_kube
from .kube import USED as KUBE_USED
from .promseries import (Series, exporter_pods, infer_step, plausible_series, read_series, runs, sample_value,
                         workload)
from .values import negative_readings

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
# Device-level readings DCGM repeats on each MIG instance of a card (the whole card's).
DEVICE_ONLY = (POWER, ENERGY)
# Cumulative counters: a reading below zero is impossible, left missing and reported.
COUNTERS = {ENERGY, *FAULT_COUNTERS}
KNOWN = set(TELEMETRY_METRICS) | {XID, *CLOCKS, *FAULT_COUNTERS, *FAULT_STATES}
# Families left out on purpose (listed once, not reported as unmapped): prefix -> why.
IGNORED_FAMILIES = (
    ("DCGM_", "DCGM fields not used for cost"),
    ("kube_", "kube-state-metrics series not used for GPU allocation"),
    ("vllm:", "vLLM metrics (import them with the vllm format)"),
    ("go_", "exporters' own metrics"),
    ("process_", "exporters' own metrics"),
    ("promhttp_", "exporters' own metrics"),
    ("python_", "exporters' own metrics"),
)
_DCGM_NAMES = "|".join(sorted(KNOWN))
_GPU_RES = 'resource=~"nvidia_com_gpu|nvidia.com/gpu"'


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
    parent: str | None = None  # the physical card of a MIG instance


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
        return _Card(gpu_id, host, model, f"{gpu}/{gi}" if gpu is not None else None, mig_capacity(profile, model),
                     base)
    return _Card(base, host, model, gpu, 1.0)


class PrometheusImporter:
    name = "prometheus"
    summary = ("DCGM exporter and kube-state-metrics from Prometheus (query JSON, /metrics scrapes, OpenMetrics, "
               "or --url) -> telemetry, events, allocations, inventory")

    def queries(self, options: ImportOptions) -> list[str]:
        """The PromQL selectors `--url` runs (each a range query over the period)."""
        pods = f"on(namespace, pod) kube_pod_container_resource_requests{{{_GPU_RES}}}"
        out = [
            f'{{__name__=~"{_DCGM_NAMES}"}}',
            f"kube_pod_container_resource_requests{{{_GPU_RES}}}",
            f'kube_pod_status_phase{{phase="Running"}} and {pods}',
            f"kube_node_status_capacity{{{_GPU_RES}}}",
            f"kube_node_labels and on(node) kube_node_status_capacity{{{_GPU_RES}}}",
        ]
        if options.owner_label:
            out.append(f"kube_pod_labels and {pods}")
        return out

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        return self.read_series(read_series(paths, options.at), options, config)

    def read_series(self, series: list[Series], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        series = plausible_series(series, parsed)  # a query answered in milliseconds: named, not a crash
        step = infer_step(series, options.step_s)
        exporters = exporter_pods(series)
        view = read_kube([s for s in series if s.name in KUBE_USED], exporters, parsed)

        tele: dict[tuple[str, float], dict] = defaultdict(dict)  # (gpu_id, ts) -> field -> value
        origin: dict[str, tuple[str, int]] = {}  # gpu_id -> (file, row) of a series, for reasons
        cards: dict[str, _Card] = {}
        pods: dict[tuple[str, str, str], set[float]] = defaultdict(set)  # (gpu, ns, pod) -> sample times
        pod_origin: dict[tuple[str, str, str], tuple[str, int]] = {}
        held_cards: set[str] = set()
        unknown: dict[tuple[str, str], list[int]] = defaultdict(list)
        event_series: list[tuple[Series, _Card]] = []
        # MIG instances whose series carried the device's power or energy (not taken: see above).
        device_on_mig: set[str] = set()

        for s in series:
            name = s.name
            if name is None:
                parsed.skip(s.file, s.row, "series has no __name__ label (export a bare metric, not an expression)")
                continue
            if name not in KNOWN:
                why = next((w for prefix, w in IGNORED_FAMILIES if name.startswith(prefix)), None)
                if why is not None:
                    if name not in KUBE_USED:
                        parsed.ignore(why, name)
                else:
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
            below = negative_readings([(t, sample_value(v)) for t, v in s.samples]) if name in COUNTERS else []
            if below:
                parsed.skip(s.file, s.row, f"{name} on {card.gpu_id}: {len(below)} readings below zero (first "
                            f"{below[0][1]:g} at {_t(below[0][0])}): a counter never reads below zero; left missing")
            ns, pod, _ = workload(s, exporters)
            if ns and pod:
                key = (card.gpu_id, ns, pod)
                pods[key].update(t for t, _ in s.samples)
                pod_origin.setdefault(key, (s.file, s.row))
                held_cards.add(card.gpu_id)
            if name in DEVICE_ONLY and card.parent is not None:
                device_on_mig.add(card.gpu_id)
            elif name in TELEMETRY_METRICS:
                fld, convert = TELEMETRY_METRICS[name]
                for t, v in s.samples:
                    x = sample_value(v)
                    if x is not None and not (x < 0 and name in COUNTERS):
                        tele[(card.gpu_id, t)][fld] = convert(x)
            else:
                event_series.append((s, card))

        for (file, name), rows in sorted(unknown.items()):
            parsed.skip(file, rows[0], f"metric {name} is not mapped ({len(rows)} series)")

        self._telemetry(parsed, tele, origin)
        if device_on_mig:
            parsed.note("MIG instance power", f"{len(device_on_mig)} MIG instances carry their card's device power or "
                        "energy counter (the whole card's, on each instance): not imported for them, their energy is "
                        "unknown (NVML has no per-instance power)")
        owner_missing: set[tuple[str, str]] = set()
        self._allocations(parsed, pods, pod_origin, step, view, options, owner_missing)
        node_cards: dict[str, list[str]] = defaultdict(list)
        for c in sorted(cards.values(), key=lambda c: c.gpu_id):
            if c.node is not None and c.capacity == 1.0:
                node_cards[c.node].append(c.gpu_id)
        placed = {(ns, pod) for _, ns, pod in pods}
        made = kube_allocations(view, placed, dict(node_cards), step, options, parsed, owner_missing)
        self._events(parsed, event_series, step)
        self._inventory(parsed, cards, made, view, options, origin)
        if owner_missing:
            parsed.note("owner label missing", f"{len(owner_missing)} pods have no {options.owner_label} label: "
                        "their namespace is the owner")
        free = sorted(set(cards) - held_cards)
        if cards and free:
            parsed.note("capacity without an owner",
                        f"{len(free)} of {len(cards)} cards carry no workload pod label (no exported_pod / pod of a "
                        "workload): no allocation, their time is unallocated capacity")
        return parsed

    def _inventory(self, parsed: Parsed, cards: dict, made: dict, view, options: ImportOptions,
                   origin: dict) -> None:
        rows = [(c.gpu_id, c.node, c.model, c.capacity, c.index, c.parent, origin[c.gpu_id]) for c in cards.values()]
        for node, gpus in made.items():
            where = view.capacity_origin[node]
            rows += [(g, node, None, 1.0, str(i), None, where) for i, g in enumerate(gpus)]
        if not rows:
            return
        without = 0
        for gpu, node, model, capacity, index, parent, (f, r) in sorted(rows, key=lambda r: r[0]):
            pool = view.pool(node, options)
            if pool is None:
                without += 1
                continue
            accel = model or view.node_labels.get(node or "", {}).get(PRODUCT_LABEL)
            parsed.add("inventory", f, r, gpu_id=gpu, pool=pool, node=node, accelerator=accel,
                       capacity=capacity, index=index, parent_gpu_id=parent)
        if without:
            parsed.note("inventory not written", f"{without} of {len(rows)} cards seen have no pool; give --pool "
                        "(or --pool-label, a node label) to write them as inventory (with MIG capacities)")

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

    def _allocations(self, parsed: Parsed, pods: dict, pod_origin: dict, step: float | None, view,
                     options: ImportOptions, owner_missing: set) -> None:
        if pods and step is None:
            for key, (f, r) in pod_origin.items():
                parsed.skip(f, r, f"pod {key[1]}/{key[2]} on {key[0]}: one sample only and no step given "
                            "(--step): the allocation's length is unknown", "allocations")
            return
        for (gpu, ns, pod), times in sorted(pods.items()):
            f, r = pod_origin[(gpu, ns, pod)]
            asked = view.pods[(ns, pod)].gpus() if (ns, pod) in view.pods else {}
            requested = max(asked.values()) if asked else None
            owner = view.owner((ns, pod), options, owner_missing)
            for t0, t1 in runs(sorted(times), step):
                parsed.add("allocations", f, r, allocation_id=f"k8s:{ns}/{pod}:{gpu}:{from_epoch(t0):%Y%m%dT%H%M%SZ}",
                           gpu_id=gpu, start=from_epoch(t0), end=from_epoch(t1 + step), owner=owner,
                           source="kubernetes", job_id=pod, requested_gpus=requested)

    def _events(self, parsed: Parsed, event_series: list, step: float | None) -> None:
        for s, card in event_series:
            name = s.name
            vals = [(t, sample_value(v)) for t, v in s.samples]
            vals = [(t, x) for t, x in vals if x is not None and not (x < 0 and name in COUNTERS)]
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


def _own_step(vals: list[tuple[float, float]]) -> float | None:
    gaps = [b[0] - a[0] for a, b in zip(vals, vals[1:]) if b[0] > a[0]]
    return min(gaps) if gaps else None


def _t(epoch: float) -> str:
    return f"{from_epoch(epoch):%Y-%m-%dT%H:%M:%SZ}"


IMPORTER = PrometheusImporter()
