"""Prometheus series from any of the forms users have: range/instant query JSON, a raw `/metrics`
scrape (text exposition) or an OpenMetrics file, and who a series' workload labels name.

A series is a metric name, its labels and (time, value) samples; values stay text until a
format reads them ("NaN" and infinities are missing). Row numbers: the series' position in a
JSON response, the line of its first sample in a text file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from . import ImportFailed, Parsed, load_json_records
from .values import UNITS, epoch_problem


@dataclass
class Series:
    file: str
    row: int
    labels: dict[str, str]
    samples: list[tuple[float, str]] = field(default_factory=list)
    time_unit: str = "seconds"  # the unit the file wrote its sample times in (text format: milliseconds)

    @property
    def name(self) -> str | None:
        return self.labels.get("__name__")

    def label(self, *names: str) -> str | None:
        for n in names:
            v = self.labels.get(n)
            if v not in (None, ""):
                return v
        return None


def sample_value(v: str) -> float | None:
    """A sample's value; NaN and infinities are missing."""
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def plausible_series(series: list[Series], parsed: Parsed) -> list[Series]:
    """The series with every sample whose time is not in 2000..2100 left out, reported once
    per series with the unit its times look like (a range query answered in milliseconds);
    a series left without samples is dropped."""
    out: list[Series] = []
    for s in series:
        scale = UNITS[s.time_unit]
        why = [epoch_problem(_raw(t * scale), s.time_unit) for t, _ in s.samples]
        bad = [w for w in why if w is not None]
        if not bad:
            out.append(s)
            continue
        parsed.skip(s.file, s.row, f"{s.name or 'series'}: {len(bad)} of {len(s.samples)} sample times are "
                    f"implausible: {bad[0]}; those samples are left out")
        kept = [p for p, w in zip(s.samples, why) if w is None]
        if kept:
            out.append(Series(s.file, s.row, s.labels, kept, s.time_unit))
    return out


def _raw(x: float) -> float | int:
    """A time as the file wrote it: whole numbers without the float's tail."""
    return int(round(x)) if abs(x - round(x)) < 1e-3 else x


def infer_step(series: list[Series], given: float | None) -> float | None:
    """The query step: given, else the smallest gap between consecutive samples of a series."""
    if given:
        return float(given)
    gaps = [b[0] - a[0] for s in series for a, b in zip(s.samples, s.samples[1:]) if b[0] - a[0] > 0]
    return min(gaps) if gaps else None


def runs(times: list[float], step: float) -> list[tuple[float, float]]:
    """Contiguous runs (first, last) of sample times at most one step (+50 %) apart."""
    out: list[tuple[float, float]] = []
    for t in times:
        if out and t - out[-1][1] <= step * 1.5:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


# --------------------------------------------------------------------------- reading


def read_series(paths: list[Path], at: datetime | None = None) -> list[Series]:
    """Every series of the files: query JSON (one response per file or line) or text exposition.

    Text samples without a timestamp (a plain scrape) take `at`, the scrape time; without it the
    file is refused, since a sample's time is what every format needs.
    """
    out: list[Series] = []
    for path in paths:
        head = path.read_bytes()[:4096].lstrip(b"\xef\xbb\xbf").lstrip()
        if head[:1] in (b"{", b"["):
            out.extend(series_from_documents(path.name, (doc for _, doc in load_json_records(path))))
        else:
            out.extend(read_exposition(path, at))
    return out


def series_from_documents(name: str, docs: Iterable[Any]) -> list[Series]:
    """Series of query responses (`data.result` of a matrix or vector), numbered through them."""
    out: list[Series] = []
    n = 0
    for doc in docs:
        for d in doc if isinstance(doc, list) else [doc]:
            for s in _result(d, name):
                n += 1
                labels = {str(k): str(v) for k, v in (s.get("metric") or {}).items()}
                if "values" in s:
                    samples = [(float(t), str(v)) for t, v in s.get("values") or []]
                elif s.get("value"):
                    t, v = s["value"]
                    samples = [(float(t), str(v))]
                else:
                    samples = []
                out.append(Series(name, n, labels, samples))
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


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{.*\})?\s+(\S+)(?:\s+(\S+))?\s*(?:#.*)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def read_exposition(path: Path, at: datetime | None) -> list[Series]:
    """Series of a Prometheus text exposition or OpenMetrics file.

    OpenMetrics (a file ending in `# EOF`) gives timestamps in seconds, the Prometheus text
    format in milliseconds; exemplars (` # {...}`) are dropped.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFailed(f"{path.name}: is not UTF-8 text (byte {exc.start})") from None
    lines = text.split("\n")
    openmetrics = text.rstrip().endswith("# EOF")
    scale = 1.0 if openmetrics else 1000.0
    fallback = at.timestamp() if at is not None else None
    by_key: dict[tuple, Series] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ImportFailed(f"{path.name}: line {number} is neither a sample nor a comment of the "
                               "Prometheus text format nor query JSON")
        name, body, value, ts = m.groups()
        labels = {"__name__": name, **_labels(body, path.name, number)}
        if ts is not None:
            try:
                t = float(ts) / scale
            except ValueError:
                raise ImportFailed(f"{path.name}: line {number}: timestamp {ts!r} is not a number") from None
        elif fallback is not None:
            t = fallback
        else:
            raise ImportFailed(f"{path.name}: line {number}: a sample without a timestamp (a /metrics scrape): "
                               "give the scrape time with --at")
        key = tuple(sorted(labels.items()))
        s = by_key.get(key)
        if s is None:
            unit = "seconds" if openmetrics or ts is None else "milliseconds"
            s = by_key[key] = Series(path.name, number, labels, time_unit=unit)
        s.samples.append((t, value))
    out = list(by_key.values())
    for s in out:
        s.samples.sort(key=lambda p: p[0])
    return out


def _labels(body: str | None, name: str, number: int) -> dict[str, str]:
    if not body:
        return {}
    inner = body[1:-1]
    out: dict[str, str] = {}
    pos = 0
    while pos < len(inner.rstrip()):
        m = _LABEL.match(inner, pos)
        if not m:
            raise ImportFailed(f"{name}: line {number}: cannot read the labels {body[:80]!r}")
        out[m.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], m.group(2))
        pos = m.end()
    return out


# --------------------------------------------------------------------------- whose series is it

# Exporters whose own pod shows in `pod` / `namespace` when Prometheus scrapes them without
# honor_labels and no workload label was exported (or renamed to exported_pod ...).
EXPORTER_NAMES = ("dcgm-exporter", "kube-state-metrics")


def workload(s: Series, exporter_pods: set[str]) -> tuple[str | None, str | None, str | None]:
    """(namespace, pod, container) of the workload a series is about, or Nones.

    `exported_*` labels win: Prometheus writes them when the target's own labels clash. Plain
    `pod`/`namespace` name the workload unless they are the exporter's own pod: a pod that is
    the plain `pod` of a series carrying exported_pod, whose container or name is an exporter's,
    or whose name is the scrape job's / service's name plus a suffix (a DaemonSet pod).
    """
    ns, pod = s.label("exported_namespace"), s.label("exported_pod")
    if ns or pod:
        return ns, pod, s.label("exported_container")
    ns, pod, container = s.label("namespace"), s.label("pod"), s.label("container")
    if pod is None or is_exporter(s, exporter_pods):
        return None, None, None
    return ns, pod, container


def is_exporter(s: Series, exporter_pods: set[str]) -> bool:
    pod, container = s.label("pod") or "", s.label("container") or ""
    if pod in exporter_pods:
        return True
    if any(e in container or e in pod for e in EXPORTER_NAMES):
        return True
    return any(v and pod.startswith(v + "-") for v in (s.label("job"), s.label("service")))


def exporter_pods(series: list[Series]) -> set[str]:
    """Pods named by plain `pod` on series that also carry exported_pod: the exporters' own."""
    return {s.labels["pod"] for s in series if s.label("exported_pod") and s.label("pod")}
