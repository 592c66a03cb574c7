"""Pull series straight from a live Prometheus over its HTTP API (`/api/v1/query_range`).

`ailedger import prometheus --url URL --start T --end T [--step S]` runs the format's queries
(`importer.queries(options)`) as range queries and hands the series to the same code that
reads the files, so a pull and an export of the same data give the same rows. Prometheus
answers at most 11,000 points per series and query: longer periods are asked for in windows
of WINDOW_STEPS steps, whose series are joined again by their labels.
"""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

from . import ImportFailed, ImportOptions, ImportResult, validate_parsed
from ..config import Config
from .promseries import Series, series_from_documents

WINDOW_STEPS = 10_000
TIMEOUT_S = 120.0


def query_range(url: str, query: str, start: float, end: float, step: float) -> dict:
    """One `/api/v1/query_range` answer as JSON; a transport or query error is an ImportFailed."""
    params = urllib.parse.urlencode({"query": query, "start": _num(start), "end": _num(end), "step": _num(step)})
    endpoint = url.rstrip("/") + "/api/v1/query_range"
    req = urllib.request.Request(endpoint, data=params.encode(), method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - the user's own server
            body = resp.read()
    except urllib.error.HTTPError as exc:  # Prometheus explains a bad query in the body
        body = exc.read()
        if not body:
            raise ImportFailed(f"{endpoint}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ImportFailed(f"{endpoint}: cannot reach Prometheus: {getattr(exc, 'reason', exc)}") from None
    try:
        doc = json.loads(body)
    except ValueError:
        raise ImportFailed(f"{endpoint}: the answer is not JSON (is this a Prometheus server?)") from None
    if doc.get("status") != "success":
        raise ImportFailed(f"{endpoint}: the query {query!r} failed: {doc.get('errorType')}: {doc.get('error')}")
    return doc


def fetch_series(url: str, queries: list[str], start: datetime, end: datetime, step: float) -> list[Series]:
    """Every series the queries return over [start, end], windows joined per label set."""
    if end <= start:
        raise ImportFailed(f"--end {end:%Y-%m-%dT%H:%M:%SZ} is not after --start {start:%Y-%m-%dT%H:%M:%SZ}")
    if not step or step <= 0 or not math.isfinite(step):
        raise ImportFailed("--step must be a positive number of seconds")
    t0, t1 = start.timestamp(), end.timestamp()
    out: list[Series] = []
    for i, query in enumerate(queries, start=1):
        merged: dict[tuple, Series] = {}
        w = t0
        while w <= t1:
            w_end = min(t1, w + (WINDOW_STEPS - 1) * step)
            for s in series_from_documents(f"query {i}", [query_range(url, query, w, w_end, step)]):
                key = tuple(sorted(s.labels.items()))
                if key in merged:
                    merged[key].samples.extend(s.samples)
                else:
                    merged[key] = s
            w = w_end + step
        for n, s in enumerate(merged.values(), start=1):
            s.row = n
            out.append(s)
    return out


def import_from_api(fmt: str, importer, url: str, start: datetime, end: datetime, step: float, config: Config,
                    options: ImportOptions) -> ImportResult:
    """Run a Prometheus-fed format over the live API; the result is the one a file import gives."""
    queries = importer.queries(options)
    series = fetch_series(url, queries, start, end, step)
    options = dataclasses.replace(options, step_s=options.step_s or step)  # the samples are a step apart
    result = validate_parsed(fmt, importer.read_series(series, options, config), config, options.stored,
                             now=options.now)
    result.input_records = bool(series)
    return result


def _num(x: float) -> str:
    return repr(float(x)) if x != int(x) else str(int(x))
