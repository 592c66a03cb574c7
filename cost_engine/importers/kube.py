"""kube-state-metrics -> GPU allocations per pod, the way Kubernetes cost tools count them.

A pod holds the GPUs it requests (`kube_pod_container_resource_requests{resource="nvidia_com_gpu"}`,
summed over its containers) while it is Running (`kube_pod_status_phase{phase="Running"} == 1`,
else a GPU container's `kube_pod_container_status_running == 1`). Which cards: when the DCGM
exporter's pod mapping puts the pod on cards, those cards (the DCGM allocations) and KSM only
adds the request; otherwise the request is spread as equal shares over the node's cards (DCGM
cards of that Hostname, else `kube_node_status_capacity{resource="nvidia_com_gpu"}` cards named
`<node>:gpu<i>`), so GPU-hours are exact even when the card is unknown.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from . import ImportOptions, Parsed, from_epoch
from .promseries import Series, runs, sample_value, workload

REQUESTS = "kube_pod_container_resource_requests"
LIMITS = "kube_pod_container_resource_limits"
PHASE = "kube_pod_status_phase"
CONTAINER_RUNNING = "kube_pod_container_status_running"
CAPACITY = "kube_node_status_capacity"
NODE_LABELS = "kube_node_labels"
POD_LABELS = "kube_pod_labels"
POD_INFO = "kube_pod_info"
USED = {REQUESTS, LIMITS, PHASE, CONTAINER_RUNNING, CAPACITY, NODE_LABELS, POD_LABELS, POD_INFO}
GPU_RESOURCES = {"nvidia_com_gpu", "nvidia.com/gpu"}
PRODUCT_LABEL = "label_nvidia_com_gpu_product"

Pod = tuple[str, str]  # (namespace, pod)


def prom_label(name: str) -> str:
    """A Kubernetes label as kube-state-metrics spells it: `team` -> `label_team`."""
    return name if name.startswith("label_") else "label_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


@dataclass
class _PodGpus:
    file: str
    row: int
    node: str | None = None
    requests: dict[str, dict[float, float]] = field(default_factory=dict)  # container -> time -> GPUs
    phase_running: dict[float, bool] = field(default_factory=dict)
    container_running: dict[str, dict[float, bool]] = field(default_factory=dict)

    def gpus(self) -> dict[float, float]:
        total: dict[float, float] = defaultdict(float)
        for by_time in self.requests.values():
            for t, n in by_time.items():
                total[t] += n
        return dict(total)

    def running(self, t: float) -> bool | None:
        if self.phase_running:
            return self.phase_running.get(t, False)
        if self.container_running:
            return any(by_time.get(t, False) for c, by_time in self.container_running.items()
                       if c in self.requests)
        return None


@dataclass
class KubeView:
    """What the kube-state-metrics series say about GPU pods and nodes."""

    pods: dict[Pod, _PodGpus] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    capacity_origin: dict[str, tuple[str, int]] = field(default_factory=dict)  # node -> (file, row)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    pod_labels: dict[Pod, dict[str, str]] = field(default_factory=dict)
    pod_node: dict[Pod, str] = field(default_factory=dict)

    def owner(self, pod: Pod, options: ImportOptions, missing: set[Pod]) -> str:
        """The namespace, or the value of the pod label the user named (namespace when it lacks it)."""
        if options.owner_label:
            v = self.pod_labels.get(pod, {}).get(prom_label(options.owner_label))
            if v:
                return v
            missing.add(pod)
        return pod[0]

    def pool(self, node: str | None, options: ImportOptions) -> str | None:
        if options.pool:
            return options.pool
        if options.pool_label and node is not None:
            return self.node_labels.get(node, {}).get(prom_label(options.pool_label)) or None
        return None


def read_kube(series: list[Series], exporters: set[str], parsed: Parsed) -> KubeView:
    view = KubeView()
    for s in series:
        name = s.name
        if name in (REQUESTS, LIMITS):
            if s.label("resource") not in GPU_RESOURCES:
                continue
            if name == LIMITS and any(x.name == REQUESTS and x.labels.get("resource") in GPU_RESOURCES
                                      for x in series):
                continue  # extended resources: requests equal limits; count them once
            pod = _pod(s, exporters)
            if pod is None:
                parsed.skip(s.file, s.row, f"{name}: series has no namespace/pod labels")
                continue
            p = view.pods.setdefault(pod, _PodGpus(s.file, s.row))
            p.node = p.node or s.label("node")
            vals = {t: x for t, v in s.samples if (x := sample_value(v)) is not None}
            p.requests.setdefault(s.label("container") or "", {}).update(vals)
        elif name in (CAPACITY,) and s.label("resource") in GPU_RESOURCES and s.label("node"):
            vals = [x for _, v in s.samples if (x := sample_value(v)) is not None]
            if vals:
                view.capacity[s.labels["node"]] = int(max(vals))
                view.capacity_origin.setdefault(s.labels["node"], (s.file, s.row))
        elif name == NODE_LABELS and s.label("node"):
            view.node_labels.setdefault(s.labels["node"], {}).update(s.labels)
        elif name in (POD_LABELS, POD_INFO):
            pod = _pod(s, exporters)
            if pod is not None and name == POD_LABELS:
                view.pod_labels.setdefault(pod, {}).update(s.labels)
            elif pod is not None and s.label("node"):
                view.pod_node[pod] = s.labels["node"]
    # running state needs the GPU pods known first
    for s in series:
        if s.name not in (PHASE, CONTAINER_RUNNING):
            continue
        pod = _pod(s, exporters)
        p = view.pods.get(pod) if pod else None
        if p is None:
            continue
        vals = {t: x == 1 for t, v in s.samples if (x := sample_value(v)) is not None}
        if s.name == PHASE:
            if s.label("phase") == "Running":
                p.phase_running.update(vals)
        else:
            p.container_running.setdefault(s.label("container") or "", {}).update(vals)
    for pod, p in view.pods.items():
        p.node = p.node or view.pod_node.get(pod)
    return view


def _pod(s: Series, exporters: set[str]) -> Pod | None:
    ns, pod, _ = workload(s, exporters)
    return (ns, pod) if ns and pod else None


def kube_allocations(view: KubeView, placed: set[Pod], node_cards: dict[str, list[str]], step: float | None,
                     options: ImportOptions, parsed: Parsed, owner_missing: set[Pod]) -> dict[str, list[str]]:
    """Allocation rows for GPU pods DCGM did not place on cards; returns the cards it made up per node.

    A node whose GPU capacity kube-state-metrics reports and whose cards DCGM does not show gets
    cards `<node>:gpu<i>` (the spelling DCGM uses without a UUID), pods or not: they are capacity.
    """
    made: dict[str, list[str]] = {
        node: [f"{node}:gpu{i}" for i in range(n)] for node, n in sorted(view.capacity.items())
        if n > 0 and not node_cards.get(node)
    }
    spread = 0
    for pod, p in sorted(view.pods.items()):
        gpus = p.gpus()
        if pod in placed or not any(n > 0 for n in gpus.values()):
            continue
        who = f"pod {pod[0]}/{pod[1]}"
        known = [p.running(t) for t in gpus]
        if all(r is None for r in known):
            parsed.skip(p.file, p.row, f"{who} requests {max(gpus.values()):g} GPUs but its running time is unknown: "
                        f"export {PHASE} (or {CONTAINER_RUNNING})", "allocations")
            continue
        held = sorted((t, n) for t, n in gpus.items() if n > 0 and p.running(t))
        if not held:
            parsed.note("kubernetes pods not running", f"{who} requests GPUs but was never Running in the samples")
            continue
        if step is None:
            parsed.skip(p.file, p.row, f"{who}: one sample only and no step given (--step): the allocation's length "
                        "is unknown", "allocations")
            continue
        cards = node_cards.get(p.node or "") or made.get(p.node or "")
        if not cards:
            parsed.skip(p.file, p.row, f"{who} on node {p.node or '(unknown)'}: the node's GPUs are unknown: export "
                        f"{CAPACITY} or DCGM metrics of its cards", "allocations")
            continue
        owner = view.owner(pod, options, owner_missing)
        spread += 1
        for n, t0, t1 in _runs_by_count(held, step):
            if n > len(cards):
                parsed.skip(p.file, p.row, f"{who} requests {n:g} GPUs but node {p.node} has {len(cards)}",
                            "allocations")
                continue
            for gpu in cards:
                parsed.add("allocations", p.file, p.row,
                           allocation_id=f"k8s:{pod[0]}/{pod[1]}:{gpu}:{from_epoch(t0):%Y%m%dT%H%M%SZ}", gpu_id=gpu,
                           start=from_epoch(t0), end=from_epoch(t1 + step), owner=owner, source="kubernetes",
                           job_id=pod[1], share=n / len(cards), requested_gpus=n)
    if spread:
        parsed.note("kubernetes GPU requests", f"{spread} pods without a DCGM pod mapping: their requested GPUs are "
                    "shares of every card of their node (which card is unknown; GPU-hours are exact)")
    return made


def _runs_by_count(held: list[tuple[float, float]], step: float) -> list[tuple[float, float, float]]:
    """(GPUs, first, last) over runs of consecutive samples with the same request."""
    out: list[tuple[float, float, float]] = []
    for n in sorted({n for _, n in held}):
        for t0, t1 in runs([t for t, m in held if m == n], step):
            out.append((n, t0, t1))
    return sorted(out, key=lambda r: r[1])
