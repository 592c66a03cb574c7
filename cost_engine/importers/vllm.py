"""vLLM Prometheus counters -> usage buckets of the requests table.

For reconciling a model server's own token counts against gateway logs. Input is what the
`prometheus` format reads (query JSON, `/metrics` scrapes with `--at`, OpenMetrics, or the
live API through `--url` with `VllmImporter.queries`). Row numbers in the unmapped list are
series positions in their file (1-based), or lines of a text file.

Counters, per `model_name` and server (the other labels: instance, pod, ...; series that
differ only in `finished_reason` or `engine` are summed):
- vllm:prompt_tokens_total              prompt tokens, cached ones included
- vllm:generation_tokens_total          output tokens
- cached prompt tokens: vllm:prompt_tokens_cached_total, else vllm:prefix_cache_hits_total
  (V1: hits counted in tokens), else vllm:gpu_prefix_cache_hits_total
- finished requests: vllm:request_success_total, else vllm:e2e_request_latency_seconds_count
- vllm:request_prefill_time_seconds_sum / vllm:request_decode_time_seconds_sum -> prefill_ms /
  decode_ms of the bucket (phase time for the input/output cost split)

Each pair of consecutive samples gives the increase of every counter over [t_i, t_i+1); a
value below the previous one is a counter reset (the increase is then the new value, as
Prometheus' `increase()` counts it). An interval with tokens but no finished request is
merged into the next one (tokens are counted before their request finishes); tokens after
the last finished request are reported unmapped. A bucket starts at the first interval where
a counter moved, never at the query start. input_tokens = prompt - cached (the contract's
input excludes cached tokens); a bucket whose cached count exceeds its prompt count is
clamped to the prompt count and noted.

A single scrape (one sample per counter) holds the totals since the server started: with
`process_start_time_seconds` of the same server it is one bucket [process start, scrape);
without it the start is unknown and the counters are reported unmapped.

Server = `namespace/pod` (else `pod`, else `instance`): the bucket key, stable across scrapes.
Owner: `ImportOptions.owner`, else the value of the label named by `owner_label`, else the
`namespace` (source `kubernetes`, like the pods' GPU allocations). Without any of them (a bare
scrape, an `instance` only, which changes on restart) the counters are unmapped with the reason.
Bucket rows: request_id `vllm:<server>:<model>:<start epoch>`, ts/end the bucket, status ok.

With `ImportOptions.stored` (an import into a store or folder), intervals that a stored bucket
of the same server and model already counts are skipped, so an export that overlaps the last
one only adds the buckets it completes; an interval straddling a stored bucket's edge (another
step grid) is reported unmapped, never split.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from pathlib import Path

import polars as pl

from ..config import Config
from . import ImportOptions, Parsed, from_epoch
from .promseries import Series, plausible_series, read_series, sample_value
from .values import hold_negative_readings, negative_readings

PROMPT = ("vllm:prompt_tokens_total", "vllm:prompt_tokens")
GENERATION = ("vllm:generation_tokens_total", "vllm:generation_tokens")
CACHED = (
    "vllm:prompt_tokens_cached_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_hits",
    "vllm:gpu_prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hits",
)
REQUESTS = ("vllm:request_success_total", "vllm:request_success", "vllm:e2e_request_latency_seconds_count")
PREFILL = ("vllm:request_prefill_time_seconds_sum",)
DECODE = ("vllm:request_decode_time_seconds_sum",)
ROLES = {"prompt": PROMPT, "output": GENERATION, "cached": CACHED, "requests": REQUESTS,
         "prefill": PREFILL, "decode": DECODE}
_SUMMED_LABELS = {"__name__", "finished_reason", "engine", "le"}
PROCESS_START = "process_start_time_seconds"


def _role(name: str) -> tuple[str, int] | None:
    for role, names in ROLES.items():
        if name in names:
            return role, names.index(name)
    return None


def increases(samples: list[tuple[float, float | None]]) -> list[tuple[float, float, float | None]]:
    """(t0, t1, increase) of consecutive samples; a drop is a reset; None where a value is missing."""
    out = []
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        if a is None or b is None:
            out.append((t0, t1, None))
        else:
            out.append((t0, t1, b - a if b >= a else b))
    return out


class VllmImporter:
    name = "vllm"
    summary = "vLLM Prometheus counters (query JSON, /metrics scrapes, OpenMetrics, or --url) -> requests usage buckets"

    def queries(self, options: ImportOptions) -> list[str]:
        names = "|".join(n for names in ROLES.values() for n in names)
        return [f'{{__name__=~"{names}"}}']

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        return self.read_series(read_series(paths, options.at), options, config)

    def read_series(self, series: list[Series], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        series = plausible_series(series, parsed)  # a query answered in milliseconds: named, not a crash
        # server key -> role -> chosen metric rank -> list of series
        groups: dict[tuple, dict[str, dict[int, list[Series]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
        starts: dict[tuple, float] = {}
        foreign: set[tuple[str, str]] = set()  # (file, metric) reported once
        for s in series:
            name = s.name or ""
            role = _role(name)
            if name == PROCESS_START:
                vals = [x for _, v in s.samples if (x := sample_value(v)) is not None]
                if vals:
                    starts[_server_key(s.labels)] = max(vals)
                continue
            if role is None:
                if name.startswith(("vllm:", "python_", "process_", "http_", "go_")):
                    parsed.ignore("not token usage (gauges, histograms, the server's own metrics)", name)
                elif name.startswith(("DCGM_", "kube_")):
                    parsed.ignore("GPU and Kubernetes metrics (import them with the prometheus format)", name)
                elif (s.file, name) not in foreign:
                    foreign.add((s.file, name))
                    parsed.skip(s.file, s.row, f"metric {name or '(no __name__)'} is not a vLLM counter")
                continue
            model = s.label("model_name")
            if model is None:
                parsed.skip(s.file, s.row, f"{name}: series has no model_name label")
                continue
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in _SUMMED_LABELS))
            groups[key][role[0]][role[1]].append(s)

        for key, roles in groups.items():
            labels = dict(key)
            self._buckets(parsed, labels, roles, options, starts.get(_server_key(labels)))
        return parsed

    def _buckets(self, parsed: Parsed, labels: dict, roles: dict, options: ImportOptions,
                 process_start: float | None) -> None:
        model = labels["model_name"]
        ns, pod = labels.get("exported_namespace") or labels.get("namespace"), \
            labels.get("exported_pod") or labels.get("pod")
        server = f"{ns}/{pod}" if ns and pod else pod or labels.get("instance") or "vllm"
        owner, source = options.owner, "vllm"
        if owner is None and options.owner_label:
            owner = labels.get(options.owner_label)
        if owner is None and ns:
            owner, source = ns, "kubernetes"
        first = next(iter(next(iter(roles.values())).values()))[0]
        if owner is None:
            parsed.skip(first.file, first.row, f"{model} on {server}: no namespace label to name the owner (an "
                        "instance address changes on restart): give --owner or --owner-label")
            return
        single = all(len(s.samples) == 1 for ranked in roles.values() for ss in ranked.values() for s in ss)
        if single and process_start is None:
            parsed.skip(first.file, first.row, f"{model} on {server}: one scrape of counters that count since the "
                        f"server started, and the start is unknown (no {PROCESS_START}): scrape twice or query a range")
            return
        per_role: dict[str, dict[tuple[float, float], float | None]] = {}
        for role, ranked in roles.items():
            series = ranked[min(ranked)]  # the preferred metric of that role present
            acc: dict[tuple[float, float], float | None] = defaultdict(float)
            for s in series:
                vals = [(t, sample_value(v)) for t, v in s.samples]
                if single:  # counters start at 0 when the process starts
                    vals = [(process_start, 0.0), *vals]
                missing = sum(1 for _, x in vals if x is None)
                if missing:
                    parsed.skip(s.file, s.row, f"{s.name} ({model}): {missing} NaN values; the intervals next to "
                                "them are not counted")
                below = negative_readings(vals)
                if below:  # impossible readings: never the base of an increase
                    parsed.skip(s.file, s.row, f"{s.name} ({model}): {len(below)} readings below zero (first "
                                f"{below[0][1]:g} at {from_epoch(below[0][0]):%Y-%m-%dT%H:%M:%SZ}): a counter never "
                                "reads below zero; each is left out (the counter taken not to move there)")
                    vals = hold_negative_readings(vals)
                for t0, t1, inc in increases(vals):
                    cur = acc[(t0, t1)]
                    acc[(t0, t1)] = None if inc is None or cur is None else cur + inc
            per_role[role] = acc
        if "prompt" not in per_role or "output" not in per_role:
            parsed.skip(first.file, first.row, f"{model} on {server}: needs vllm:prompt_tokens_total and "
                        "vllm:generation_tokens_total")
            return
        has_requests = "requests" in per_role
        if not has_requests:
            parsed.note("vllm requests unknown", f"{model} on {server}: no request counter "
                        "(vllm:request_success_total); each bucket counts as 1 request")
        intervals = sorted(set().union(*(set(v) for v in per_role.values())))
        stored = _stored_buckets(options, f"vllm:{server}:{model}:", intervals)
        intervals, partial = _uncounted(intervals, stored)
        if partial:
            parsed.skip(first.file, first.row, f"{model} on {server}: {partial} intervals straddle the edge of a "
                        "stored bucket (the exports' steps are not aligned): their increase cannot be split, "
                        "not counted", "requests")
        carry = {"prompt": 0.0, "output": 0.0, "cached": 0.0, "requests": 0.0, "prefill": 0.0, "decode": 0.0}
        carry_start: float | None = None
        clamped = 0
        for interval in intervals:
            if interval is None:  # inside a stored bucket: counted by the export that stored it
                if carry_start is not None and (carry["prompt"] + carry["output"]) > 0:
                    parsed.skip(first.file, first.row, f"{model} on {server}: {round(carry['prompt'])} prompt and "
                                f"{round(carry['output'])} output tokens just before a stored bucket "
                                f"(from {from_epoch(carry_start):%Y-%m-%dT%H:%M:%SZ}): no bucket", "requests")
                carry = dict.fromkeys(carry, 0.0)
                carry_start = None
                continue
            t0, t1 = interval
            vals = {r: per_role[r].get((t0, t1)) if r in per_role else 0.0 for r in carry}
            if any(vals[r] is None for r in ("prompt", "output")) or (has_requests and vals["requests"] is None):
                continue  # a NaN next to this interval: reported above
            if carry_start is None and not any(vals[r] for r in carry):
                continue  # nothing happened: the next bucket starts where a counter moves
            for r in carry:
                carry[r] += vals[r] or 0.0
            carry_start = t0 if carry_start is None else carry_start
            tokens = carry["prompt"] + carry["output"]
            if has_requests and carry["requests"] < 0.5:
                continue  # tokens of requests still running: wait for them to finish
            if not has_requests and tokens <= 0:
                carry = dict.fromkeys(carry, 0.0)
                carry_start = None
                continue
            prompt, cached = round(carry["prompt"]), round(carry["cached"])
            if cached > prompt:
                cached, clamped = prompt, clamped + 1
            parsed.add(
                "requests", first.file, first.row,
                request_id=f"vllm:{server}:{model}:{int(carry_start)}", ts=from_epoch(carry_start), end=from_epoch(t1),
                owner=owner, source=source, model=model, input_tokens=prompt - cached, cached_input_tokens=cached,
                output_tokens=round(carry["output"]), status="ok",
                requests=round(carry["requests"]) if has_requests else None,
                prefill_ms=carry["prefill"] * 1000 if "prefill" in per_role else None,
                decode_ms=carry["decode"] * 1000 if "decode" in per_role else None,
            )
            carry = dict.fromkeys(carry, 0.0)
            carry_start = None
        if carry_start is not None and (carry["prompt"] + carry["output"]) > 0:
            parsed.skip(first.file, first.row, f"{model} on {server}: {round(carry['prompt'])} prompt and "
                        f"{round(carry['output'])} output tokens after the last finished request "
                        f"(from {from_epoch(carry_start):%Y-%m-%dT%H:%M:%SZ}): no bucket", "requests")
        if clamped:
            parsed.note("vllm cached tokens", f"{model} on {server}: {clamped} buckets counted more cached than "
                        "prompt tokens (the counters tick at different moments); cached clamped to prompt")


def _stored_buckets(options: ImportOptions, prefix: str, intervals: list) -> list[tuple[float, float]]:
    """[ts, end) in epoch seconds of the buckets of this server and model already stored."""
    if options.stored is None or not intervals:
        return []
    old = options.stored("requests", from_epoch(intervals[0][0]), from_epoch(intervals[-1][1]))
    old = old.filter(pl.col("request_id").str.starts_with(prefix) & pl.col("end").is_not_null())
    return sorted((a.timestamp(), b.timestamp()) for a, b in old.select("ts", "end").iter_rows())


def _uncounted(intervals: list, stored: list[tuple[float, float]]) -> tuple[list[tuple[float, float] | None], int]:
    """The intervals no stored bucket counts, None where a run of them was left out,
    and how many straddle a stored bucket's edge (neither inside nor outside: not counted)."""
    if not stored:
        return intervals, 0
    starts = [a for a, _ in stored]
    out: list = []
    partial = 0
    for t0, t1 in intervals:
        i = bisect_right(starts, t0) - 1  # the last stored bucket starting at or before t0
        j = bisect_right(starts, t1 - 1e-9) - 1  # the last one starting before t1
        if i >= 0 and t1 <= stored[i][1]:
            if not out or out[-1] is not None:
                out.append(None)
        elif j > i or (i >= 0 and t0 < stored[i][1]):
            partial += 1
        else:
            out.append((t0, t1))
    return out, partial


def _server_key(labels: dict) -> tuple:
    """Labels naming one server process (what process_start_time_seconds carries)."""
    return tuple(sorted((k, v) for k, v in labels.items() if k not in _SUMMED_LABELS and k != "model_name"))


IMPORTER = VllmImporter()
