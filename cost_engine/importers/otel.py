"""OpenTelemetry GenAI spans (OTLP JSON) -> requests.

Input: OTLP/JSON trace exports (`{"resourceSpans": [...]}`, as the collector's file exporter
writes them, one per file or one per line). Row numbers in the unmapped list count spans in
the file (1-based, across resources and scopes).

A span is a model call when it has GenAI attributes and its `gen_ai.operation.name` is a
model operation (chat, text_completion, generate_content, embeddings) or absent; agent and
tool spans (invoke_agent, execute_tool, ...) would count their children's tokens twice and
are skipped (counted in the notes), as are spans without any `gen_ai.*` attribute.

- tokens: gen_ai.usage.input_tokens (or the deprecated gen_ai.usage.prompt_tokens) includes
  cached tokens: cached_input_tokens = gen_ai.usage.cache_read.input_tokens (or
  gen_ai.usage.cache_read_input_tokens / gen_ai.usage.input_tokens.cached), input_tokens =
  input - cached. gen_ai.usage.output_tokens (or gen_ai.usage.completion_tokens); an
  embeddings span without output tokens has 0. More cached than input tokens breaks the
  convention: unmapped.
- model: gen_ai.response.model (what served it), else gen_ai.request.model.
- owner: `ImportOptions.owner`, else the attribute named by `ImportOptions.owner_attribute`
  (span, then resource), else the resource's service.name; source `otel`.
- request_id `<traceId>:<spanId>`; ts = start; latency_ms = end - start; ttft_ms from
  gen_ai.server.time_to_first_token (seconds) when a span carries it.
- status: span status ERROR -> error (timeout / cancelled when error.type says so), else ok.
  A failed call (status ERROR or error.type) without usage attributes is an error row with 0
  tokens, as the contract counts failed requests; a successful span without usage is unmapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Config
from . import ImportFailed, ImportOptions, Parsed, load_json_records, to_float, to_int
from .values import count_value, from_epoch_checked

MODEL_OPERATIONS = {"chat", "text_completion", "generate_content", "embeddings", "completion"}
INPUT = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHED = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
          "gen_ai.usage.input_tokens.cached")
TTFT = ("gen_ai.server.time_to_first_token", "gen_ai.response.time_to_first_token")


def attr_value(v: Any) -> Any:
    """An OTLP AnyValue as Python (intValue arrives as a string in OTLP JSON)."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    # A value that is no number stays as it came, so a reason can say what it was.
    if "intValue" in v:
        n = to_int(v["intValue"])
        return v["intValue"] if n is None else n
    if "doubleValue" in v:
        try:
            return float(v["doubleValue"])  # NaN and infinities too: callers check
        except (TypeError, ValueError):
            return v["doubleValue"]
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [attr_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return attributes((v["kvlistValue"] or {}).get("values", []))
    return None


def attributes(items: Any) -> dict[str, Any]:
    if isinstance(items, dict):  # some exporters write a plain map
        return dict(items)
    return {a.get("key"): attr_value(a.get("value")) for a in items or [] if isinstance(a, dict)}


def spans(path: Path) -> list[tuple[dict, dict]]:
    """(resource attributes, span) for every span of the file, in order."""
    out: list[tuple[dict, dict]] = []
    for _, doc in load_json_records(path):
        docs = doc if isinstance(doc, list) else [doc]
        for d in docs:
            if not isinstance(d, dict) or "resourceSpans" not in d:
                raise ImportFailed(f"{path.name}: not an OTLP JSON trace export (no resourceSpans)")
            for rs in d.get("resourceSpans") or []:
                res = attributes((rs.get("resource") or {}).get("attributes"))
                for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
                    for sp in ss.get("spans") or []:
                        out.append((res, sp))
    return out


def _first(attrs: dict, names: tuple[str, ...]) -> Any:
    return _named(attrs, names)[1]


def _named(attrs: dict, names: tuple[str, ...]) -> tuple[str, Any]:
    """(name, value) of the first of the attributes present; (names[0], None) when none is."""
    for n in names:
        if attrs.get(n) is not None:
            return n, attrs[n]
    return names[0], None


class OtelImporter:
    name = "otel"
    summary = "OpenTelemetry GenAI spans (OTLP JSON) -> requests"

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        other = agent = 0
        for path in paths:
            for n, (res, sp) in enumerate(spans(path), start=1):
                a = attributes(sp.get("attributes"))
                if not any(str(k).startswith("gen_ai.") for k in a):
                    other += 1
                    continue
                op = a.get("gen_ai.operation.name")
                if op is not None and op not in MODEL_OPERATIONS:
                    agent += 1
                    continue
                self._span(parsed, path, n, res, sp, a, options)
        if other:
            parsed.note("otel spans", f"{other} spans without gen_ai attributes skipped")
        if agent:
            parsed.note("otel spans", f"{agent} agent/tool spans skipped (their model calls are spans of their own)")
        return parsed

    def _span(self, parsed: Parsed, path: Path, n: int, res: dict, sp: dict, a: dict, options: ImportOptions) -> None:
        trace, span = sp.get("traceId"), sp.get("spanId")
        if not trace or not span:
            parsed.skip(path, n, "span without traceId/spanId")
            return
        rid = f"{trace}:{span}"
        counts: list[int | None] = []
        for names in (INPUT, OUTPUT, CACHED):
            name, raw = _named(a, names)
            c, why = count_value(raw)
            if why is not None:
                parsed.skip(path, n, f"span {rid}: {name} {why}")
                return
            counts.append(c)
        inp, out, cached = counts[0], counts[1], counts[2] or 0
        if _status(sp, a) != "ok" and inp is None and out is None:
            inp, out = 0, 0  # a failed call: a request that produced nothing
        if inp is None:
            parsed.skip(path, n, f"span {rid}: no gen_ai.usage.input_tokens")
            return
        if out is None:
            if a.get("gen_ai.operation.name") != "embeddings":
                parsed.skip(path, n, f"span {rid}: no gen_ai.usage.output_tokens")
                return
            out = 0
        if cached > inp:
            parsed.skip(path, n, f"span {rid}: cache_read tokens ({cached}) exceed input_tokens ({inp}); "
                        "input_tokens should include them")
            return
        model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
        if options.owner:
            owner = options.owner
        elif options.owner_attribute:
            owner = a.get(options.owner_attribute, res.get(options.owner_attribute))
        else:
            owner = res.get("service.name")
        if owner is None:
            parsed.skip(path, n, f"span {rid}: no {options.owner_attribute or 'service.name'} to name the owner")
            return
        times: dict[str, int | None] = {}
        for k in ("startTimeUnixNano", "endTimeUnixNano"):
            raw = sp.get(k)
            times[k] = to_int(raw)
            if raw not in (None, "", 0, "0"):  # OTLP writes 0 for an unset time
                why = from_epoch_checked(raw if times[k] is None else times[k], "nanoseconds")[1]
                if why is not None:  # milliseconds in a nanosecond field lands in 1970
                    parsed.skip(path, n, f"span {rid}: {k} {why}")
                    return
        t0, t1 = times["startTimeUnixNano"] or None, times["endTimeUnixNano"] or None
        if t0 is not None and t1 is not None and t1 < t0:
            parsed.skip(path, n, f"span {rid}: ends before it starts (endTimeUnixNano {t1} < startTimeUnixNano "
                        f"{t0}, {(t0 - t1) / 1e6:g} ms): its times cannot be trusted")
            return
        ttft = to_float(_first(a, TTFT))
        parsed.add(
            "requests", path, n,
            request_id=rid, ts=None if t0 is None else from_epoch_checked(t0, "nanoseconds")[0], owner=str(owner),
            source="otel", model=model, input_tokens=inp - cached, cached_input_tokens=cached, output_tokens=out,
            status=_status(sp, a), ttft_ms=None if ttft is None else ttft * 1000,
            latency_ms=None if t0 is None or t1 is None else (t1 - t0) / 1e6,
        )


def _status(sp: dict, a: dict) -> str:
    code = (sp.get("status") or {}).get("code")
    error = code in (2, "2", "STATUS_CODE_ERROR")
    etype = str(a.get("error.type") or "").lower()
    if not error and not etype:
        return "ok"
    if "timeout" in etype:
        return "timeout"
    if "cancel" in etype:
        return "cancelled"
    return "error"


IMPORTER = OtelImporter()
