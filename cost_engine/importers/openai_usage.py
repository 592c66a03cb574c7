"""OpenAI organization usage and costs exports -> requests buckets and api_fees costs.

Input: responses of `GET /v1/organization/usage/<kind>` and `GET /v1/organization/costs`:
a page (`{"object": "page", "data": [bucket, ...]}`), a list of pages, a list of buckets (what
the cookbook's paging loop collects), a single bucket, or JSON lines of any of these. Each
bucket has `start_time`/`end_time` (epoch seconds) and its results under `results` (the API)
or `result` (the SDKs' typed pages). Row numbers in the unmapped list count results in the
file (1-based, across buckets and pages).

Kinds: completions, embeddings and moderations results are token usage (embeddings and
moderations have input tokens only: output 0); images, audio, vector stores, code interpreter
sessions, file and web searches are not tokens and are ignored on purpose (their money is in
the costs export), listed once.

Completions result (`organization.usage.completions.result`) -> one usage bucket:
- input_tokens includes input_cached_tokens: input_tokens = input_tokens - input_cached_tokens,
  cached_input_tokens = input_cached_tokens; output_tokens; requests = num_model_requests.
- owner = project_id (source `openai`), else `ImportOptions.owner` (the owner of an export
  that was not grouped by project); model = model: the query needs `group_by=project_id,model`
  (api_key_id, user_id and batch may be grouped too and enter the bucket key); a result
  without a model (or without any owner) is reported unmapped.
- request_id `openai:<start_time>:<project>:<model>:<api_key_id>:<user_id>:<batch>`.

Costs result (`organization.costs.result`) -> one `costs` row of category `api_fees`:
amount.value in amount.currency, over the bucket, a direct cost of owner = project_id
(source `openai`); `group_by=project_id` is needed (without a project the money has no
owner and is reported unmapped). cost_id `openai:<start_time>:<project>:<line_item>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import Config
from . import ImportFailed, ImportOptions, Parsed, from_epoch, load_json_records, to_float
from .values import count_value, epoch_problem

COMPLETIONS = "organization.usage.completions.result"
EMBEDDINGS = "organization.usage.embeddings.result"
MODERATIONS = "organization.usage.moderations.result"
COSTS = "organization.costs.result"
TOKEN_KINDS = (COMPLETIONS, EMBEDDINGS, MODERATIONS)
NOT_TOKENS = "usage that is not tokens (its money is in the costs export)"


def buckets(path: Path) -> list[dict]:
    out: list[dict] = []
    for _, doc in load_json_records(path):
        pages = doc if isinstance(doc, list) else [doc]
        for page in pages:
            if not isinstance(page, dict):
                raise ImportFailed(f"{path.name}: expected usage pages ({{'object': 'page', 'data': [...]}})")
            if page.get("object") == "bucket" or "results" in page or "result" in page:
                out.append(page)
                continue
            data = page.get("data")
            if not isinstance(data, list):
                raise ImportFailed(f"{path.name}: expected usage pages ({{'object': 'page', 'data': [...]}}) "
                                   "or buckets")
            out.extend(b for b in data if isinstance(b, dict))
    return out


def _results(bucket: dict) -> list:
    got = bucket.get("results")
    return list(got if got is not None else bucket.get("result") or [])


def _kind(result: dict) -> str | None:
    obj = result.get("object")
    if obj is not None:
        return obj
    if "amount" in result:
        return COSTS
    if "input_tokens" in result:
        return COMPLETIONS if "output_tokens" in result else EMBEDDINGS
    return None


class OpenAIUsageImporter:
    name = "openai"
    summary = "OpenAI organization usage (completions, embeddings, moderations) and costs -> requests and api_fees"

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed:
        parsed = Parsed()
        for path in paths:
            n = 0
            for bucket in buckets(path):
                t0, t1 = to_float(bucket.get("start_time")), to_float(bucket.get("end_time"))
                # A bucket in milliseconds (or any other unit) is named, never a crash.
                wrong = next((f"bucket {k} {why}" for k in ("start_time", "end_time") if bucket.get(k) is not None
                              and (why := epoch_problem(bucket[k])) is not None), None)
                for result in _results(bucket):
                    n += 1
                    if not isinstance(result, dict):
                        parsed.skip(path, n, "result is not an object")
                        continue
                    if wrong is not None:
                        parsed.skip(path, n, wrong)
                        continue
                    if t0 is None or t1 is None:
                        parsed.skip(path, n, "bucket without start_time/end_time")
                        continue
                    kind = _kind(result)
                    if kind in TOKEN_KINDS:
                        self._completions(parsed, path, n, result, t0, t1, options, kind)
                    elif kind == COSTS:
                        self._costs(parsed, path, n, result, t0, t1, options)
                    elif isinstance(kind, str) and kind.startswith("organization.usage."):
                        parsed.ignore(NOT_TOKENS, kind.removeprefix("organization.usage.").removesuffix(".result"))
                    else:
                        parsed.skip(path, n, f"result type {result.get('object')!r} is not mapped "
                                    "(usage and costs results are)")
        return parsed

    def _completions(self, parsed: Parsed, path: Path, n: int, r: dict, t0: float, t1: float,
                     options: ImportOptions, kind: str) -> None:
        project, model = r.get("project_id") or options.owner, r.get("model")
        if not project or not model:
            missing = " and ".join(x for x, v in (("project_id", project), ("model", model)) if not v)
            parsed.skip(path, n, f"usage without {missing}: query with group_by=project_id,model")
            return
        counts: dict[str, int | None] = {}
        for k in ("num_model_requests", "input_tokens", "input_cached_tokens", "output_tokens"):
            counts[k], why = count_value(r.get(k))
            if why is not None:
                parsed.skip(path, n, f"usage of {model} for {project}: {k} {why}")
                return
        requests = counts["num_model_requests"] or 0
        inp, cached, out = counts["input_tokens"], counts["input_cached_tokens"] or 0, counts["output_tokens"]
        if kind != COMPLETIONS and out is None:
            out = 0  # embeddings and moderations produce no output tokens
        if requests == 0 and not (inp or out):
            return  # an empty group: nothing happened
        if inp is not None and cached > inp:
            parsed.skip(path, n, f"input_cached_tokens ({cached}) exceed input_tokens ({inp}); "
                        "input_tokens should include them")
            return
        if requests == 0:
            parsed.skip(path, n, f"{inp} input and {out} output tokens with num_model_requests 0")
            return
        key = ":".join(str(x) for x in (int(t0), project, model, _k(r.get("api_key_id")), _k(r.get("user_id")),
                                         _k(r.get("batch"))))
        prefix = "openai" if kind == COMPLETIONS else f"openai-{kind.split('.')[2]}"
        parsed.add(
            "requests", path, n,
            request_id=f"{prefix}:{key}", ts=from_epoch(t0), end=from_epoch(t1), owner=project, source="openai",
            model=model, input_tokens=None if inp is None else inp - cached, cached_input_tokens=cached,
            output_tokens=out, status="ok", requests=requests,
        )

    def _costs(self, parsed: Parsed, path: Path, n: int, r: dict, t0: float, t1: float,
               options: ImportOptions) -> None:
        amount = r.get("amount")
        value = to_float(amount.get("value")) if isinstance(amount, dict) else to_float(amount)
        currency = amount.get("currency") if isinstance(amount, dict) else None
        project = r.get("project_id") or options.owner
        if value is None:
            parsed.skip(path, n, "cost without amount.value")
            return
        if not project:
            parsed.skip(path, n, f"cost of {value:g} {str(currency or '').upper()} without project_id: "
                        "query with group_by=project_id, or name the owner with --owner (an api_fees cost needs one)")
            return
        line = r.get("line_item")
        parsed.add(
            "costs", path, n,
            cost_id=f"openai:{int(t0)}:{project}:{_k(line)}", category="api_fees", amount=value,
            currency=str(currency).upper() if currency else None, start=from_epoch(t0), end=from_epoch(t1),
            owner=project, source="openai", line_item=line,
        )


def _k(v: Any) -> str:
    return "-" if v is None or v == "" else str(v).lower() if isinstance(v, bool) else str(v)


IMPORTER = OpenAIUsageImporter()
