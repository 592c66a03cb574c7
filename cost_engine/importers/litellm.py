"""LiteLLM proxy spend logs and daily spend tables -> requests (rows and usage buckets).

Input: an export of `LiteLLM_SpendLogs` (CSV, JSON list, `{"data": [...]}` of
`/spend/logs/v2`, or JSON lines), or of a daily spend table (`LiteLLM_DailyTeamSpend`,
`LiteLLM_DailyUserSpend`): each record is told apart by its fields (`request_id` vs `date`).
Row numbers: the data row of a CSV, the record's position in a JSON list, the line of JSON lines.

Spend log -> one request:
- request_id; ts = startTime; latency_ms = endTime - startTime; ttft_ms =
  completionStartTime - startTime (when both are there).
- owner: team_id, falling back to api_key (the hashed key) when a row has no team (noted);
  `ImportOptions.owner_by` picks another field (api_key, user, end_user). Source `litellm`.
- model: model_group (the name callers use, the one allocations name) when set, else model.
- prompt_tokens includes cached tokens: cached_input_tokens comes from the metadata
  (usage_object.prompt_tokens_details.cached_tokens, usage_object.cache_read_input_tokens,
  additional_usage_values.cache_read_input_tokens, in that order) and input_tokens =
  prompt_tokens - cached. A row with more cached than prompt tokens does not follow that
  convention and is reported unmapped.
- status: success -> ok, failure -> error (other values go to validation as they are).

Daily spend row (one UTC day, per owner, key and model) -> up to two usage buckets:
`successful_requests` with all the tokens (status ok) and `failed_requests` (status error,
no tokens); prompt_tokens includes cache_read_input_tokens as above. owner = team_id or
user_id (or `owner_by`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from ..config import Config
from . import (UTC, ImportFailed, ImportOptions, LocalTimeError, Parsed, dig, load_json_records,
               local_time_refused, parse_time)
from .values import count_value, epoch_problem, shown

_CACHED_PATHS = (
    ("usage_object", "prompt_tokens_details", "cached_tokens"),
    ("usage_object", "cache_read_input_tokens"),
    ("additional_usage_values", "cache_read_input_tokens"),
    ("additional_usage_values", "prompt_tokens_details", "cached_tokens"),
)
_STATUS = {"success": "ok", "failure": "error", "ok": "ok", "error": "error"}


def records(path: Path) -> list[tuple[int, dict]]:
    """(row, record) from a CSV, JSON or JSON-lines export."""
    if path.suffix.lower() in (".csv", ".tsv") or path.name.endswith(".csv.gz"):
        try:
            frame = pl.read_csv(path, infer_schema=False, separator="\t" if path.suffix == ".tsv" else ",")
        except Exception as exc:
            raise ImportFailed(f"{path.name}: cannot parse as CSV: {str(exc).splitlines()[0]}") from None
        return [(i, r) for i, r in enumerate(frame.to_dicts(), start=1)]
    out: list[tuple[int, dict]] = []
    for row, doc in load_json_records(path):
        items = doc.get("data", doc.get("logs")) if isinstance(doc, dict) else doc
        if isinstance(items, list):
            out.extend((i, r) for i, r in enumerate(items, start=1))
        elif isinstance(doc, dict):
            out.append((row, doc))  # one record (a JSON-lines line)
        else:
            raise ImportFailed(f"{path.name}: expected spend log records (a list, {{'data': [...]}} or JSON lines)")
    return out


def _cached(rec: dict) -> tuple[str, Any]:
    """(where, raw value) of the first cached-token count the record carries."""
    meta = rec.get("metadata")
    for path in _CACHED_PATHS:
        v = dig(meta, *path)
        if v is not None:
            return "metadata " + ".".join(path), v
    return "cache_read_input_tokens", rec.get("cache_read_input_tokens")


def counts(rec: dict, fields: dict[str, Any]) -> tuple[dict[str, int | None], str | None]:
    """The token and request counts of a record by field, or the first that is no count and
    what it was (`prompt_tokens is 1.5, not a whole number`), rather than calling it missing."""
    out: dict[str, int | None] = {}
    for name, raw in fields.items():
        out[name], why = count_value(raw)
        if why is not None:
            return out, f"{name} {why}"
    return out, None


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v.strip() in ("", "null", "None"))


class LitellmImporter:
    name = "litellm"
    summary = "LiteLLM spend logs / daily spend tables -> requests"

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        tz = config.period.source_timezone
        fallback = 0
        for path in paths:
            for row, rec in records(path):
                if not isinstance(rec, dict):
                    parsed.skip(path, row, "record is not an object")
                elif "request_id" in rec:
                    fallback += self._log(parsed, path, row, rec, options, tz)
                elif "date" in rec:
                    self._daily(parsed, path, row, rec, options)
                else:
                    parsed.skip(path, row, "neither a spend log row (request_id) nor a daily spend row (date)")
        if fallback:
            parsed.note("litellm owner", f"{fallback} spend log rows have no team_id: their owner is the api_key")
        return parsed

    def _owner(self, rec: dict, options: ImportOptions, daily: bool) -> tuple[str | None, bool]:
        by = options.owner_by
        if by:
            v = rec.get(by)
            return (None if _blank(v) else str(v)), False
        first = "team_id" if not daily or "team_id" in rec else "user_id"
        if not _blank(rec.get(first)):
            return str(rec[first]), False
        if not _blank(rec.get("api_key")):
            return str(rec["api_key"]), True
        return None, False

    def _log(self, parsed: Parsed, path: Path, row: int, rec: dict, options: ImportOptions, tz: str | None) -> int:
        rid = rec.get("request_id")
        if _blank(rid):
            parsed.skip(path, row, "no request_id")
            return 0
        owner, fell_back = self._owner(rec, options, daily=False)
        if owner is None:
            parsed.skip(path, row, f"request {rid}: no {options.owner_by or 'team_id or api_key'} to name the owner"
                        + _other_owner_hint(rec, options))
            return 0
        model = rec.get("model_group") if not _blank(rec.get("model_group")) else rec.get("model")
        where, raw_cached = _cached(rec)
        got, why = counts(rec, {"prompt_tokens": rec.get("prompt_tokens"),
                                "completion_tokens": rec.get("completion_tokens"), where: raw_cached})
        if why is not None:
            parsed.skip(path, row, f"request {rid}: {why}")
            return 0
        prompt, completion, cached = got["prompt_tokens"], got["completion_tokens"], got[where] or 0
        if prompt is not None and cached > prompt:
            parsed.skip(path, row, f"request {rid}: cached tokens ({cached}) exceed prompt_tokens ({prompt}); "
                        "prompt_tokens should include them")
            return 0
        for k in _TIMES:
            why = _epoch_problem(rec.get(k))
            if why is not None:  # an epoch in milliseconds: named, not a crash or a failed parse
                parsed.skip(path, row, f"request {rid}: {k} {why}")
                return 0
        try:  # the importers' one local-time rule (offset-less times need source_timezone)
            start, end, first = (parse_time(_text(rec.get(f)), tz) for f in _TIMES)
        except LocalTimeError as exc:
            bad = next(f for f in _TIMES if local_time_refused(_text(rec.get(f)), tz))
            parsed.skip(path, row, f"request {rid}: {bad} {exc}")
            return 0
        for k, t in (("endTime", end), ("completionStartTime", first)):
            ms = _ms(start, t)
            if ms is not None and ms < 0:  # a reversed span: neither time can be trusted
                parsed.skip(path, row, f"request {rid}: {k} {shown(_text(rec.get(k)))} is {-ms:g} ms before "
                            f"startTime {shown(_text(rec.get('startTime')))}: its times cannot be trusted")
                return 0
        status = rec.get("status")
        parsed.add(
            "requests", path, row,
            request_id=str(rid), ts=_text(rec.get("startTime")), owner=owner, source="litellm",
            model=None if _blank(model) else str(model),
            input_tokens=None if prompt is None else prompt - cached, cached_input_tokens=cached,
            output_tokens=completion,
            status=_STATUS.get(str(status).lower(), str(status)) if not _blank(status) else None,
            ttft_ms=_ms(start, first), latency_ms=_ms(start, end),
        )
        return int(fell_back)

    def _daily(self, parsed: Parsed, path: Path, row: int, rec: dict, options: ImportOptions) -> None:
        owner, _ = self._owner(rec, options, daily=True)
        day = _text(rec.get("date"))
        if owner is None:
            parsed.skip(path, row, f"daily row {day}: no team_id, user_id or api_key to name the owner"
                        + _other_owner_hint(rec, options))
            return
        try:
            d0 = datetime.strptime((day or "")[:10], "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            parsed.skip(path, row, f"daily row: date {day!r} is not YYYY-MM-DD")
            return
        model = rec.get("model_group") if not _blank(rec.get("model_group")) else rec.get("model")
        names = ("prompt_tokens", "cache_read_input_tokens", "completion_tokens", "api_requests", "failed_requests",
                 "successful_requests")
        got, why = counts(rec, {k: rec.get(k) for k in names})
        if why is not None:
            parsed.skip(path, row, f"daily row {day}: {why}")
            return
        prompt, cached, output = (got[k] or 0 for k in names[:3])
        total, failed, ok = got["api_requests"], got["failed_requests"] or 0, got["successful_requests"]
        if ok is None:
            ok = (total or 0) - failed
        if cached > prompt:
            parsed.skip(path, row, f"daily row {day}: cache_read_input_tokens ({cached}) exceed prompt_tokens "
                        f"({prompt}); prompt_tokens should include them")
            return
        key = f"litellm-daily:{owner}:{rec.get('api_key') or '-'}:{model or '-'}:{d0:%Y-%m-%d}"
        common = dict(owner=owner, source="litellm", model=None if _blank(model) else str(model),
                      ts=d0, end=d0 + timedelta(days=1))
        tokens = (prompt - cached, cached, output)
        if ok > 0:
            parsed.add("requests", path, row, request_id=key, input_tokens=tokens[0], cached_input_tokens=tokens[1],
                       output_tokens=tokens[2], status="ok", requests=ok, **common)
            tokens = (0, 0, 0)
        if failed > 0:
            parsed.add("requests", path, row, request_id=key + ":failed", input_tokens=tokens[0],
                       cached_input_tokens=tokens[1], output_tokens=tokens[2], status="error", requests=failed,
                       **common)
        elif ok <= 0:
            if sum(tokens):
                parsed.skip(path, row, f"daily row {day}: tokens but no requests")
            # an empty row (no requests, no tokens) has nothing to import


_TIMES = ("startTime", "endTime", "completionStartTime")


_OWNER_FIELDS = ("team_id", "api_key", "user", "user_id", "end_user")


def _other_owner_hint(rec: dict, options: ImportOptions) -> str:
    """`; it has end_user 'x': import with --owner-by end_user` when another owner field is set."""
    for f in _OWNER_FIELDS:
        if f != options.owner_by and not _blank(rec.get(f)):
            return f"; it has {f} {str(rec[f])!r}: import with --owner-by {f}"
    return ""


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def _ms(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return None
    return round((b - a).total_seconds() * 1000, 3)


def _epoch_problem(v: Any) -> str | None:
    """Why a time written as an epoch number is implausible (None for ISO text or no value)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    if isinstance(v, str) and not re.fullmatch(r"\s*[+-]?\d+(\.\d+)?\s*", v):
        return None
    return epoch_problem(v.strip() if isinstance(v, str) else v)


IMPORTER = LitellmImporter()
