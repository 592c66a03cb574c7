"""Implausible values in every importer that reads them (issue 38, items 7, 15, 21, 22): epochs
in the wrong unit, spans that end before they start, token counts that are no counts, counter
readings below zero. Each is an unmapped record whose reason says what the value was; none
crashes, none is imported as if it were right. Inputs are built here; figures by hand."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_engine.import_cli import import_cmd
from cost_engine.importers import ImportOptions, import_files
from cost_engine.importers.values import count_value, epoch_problem

UTC = timezone.utc
T0 = 1790812800  # 2026-10-01T00:00:00Z


def reasons(result) -> list[str]:
    return result.unmapped["reason"].to_list()


def write(tmp_path: Path, name: str, doc) -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_epoch_problem_names_the_unit():
    """1790812800 s is 2026-10-01: plausible. x 1000 is milliseconds, x 1e9 nanoseconds; read as
    nanoseconds, 1790812800000 is 1790.8128 s after 1970 (1970-01-01T00:29:50Z) and fits as
    milliseconds; 1790812800 x 1e12 ns = 1.79e12 s is the year ~58,700: 1000 times too large."""
    assert epoch_problem(T0) is None
    assert epoch_problem(T0 * 1000) == "1790812800000 is not in epoch seconds: it looks like milliseconds"
    assert epoch_problem(T0 * 10**9) == "1790812800000000000 is not in epoch seconds: it looks like nanoseconds"
    assert epoch_problem(T0 * 1000, "nanoseconds") == ("1790812800000 is not in epoch nanoseconds: it looks like "
                                                        "milliseconds")
    assert "times too large" in epoch_problem(T0 * 10**12, "nanoseconds")
    assert "1970-01-01T00:00:05Z" in epoch_problem(5)


def test_count_value_says_what_the_value_was():
    assert count_value(12) == (12, None)
    assert count_value("12") == (12, None)
    assert count_value(12.0) == (12, None)
    assert count_value(None) == (None, None)
    assert count_value(1.5) == (None, "is 1.5, not a whole number")
    assert count_value(True) == (None, "is true, not a number")
    assert count_value(float("nan")) == (None, "is NaN, not a number")
    assert count_value("NaN") == (None, "is NaN, not a number")
    assert count_value(-3) == (None, "is -3, below zero")
    assert count_value("many") == (None, "is 'many', not a number")


# ------------------------------------------------------------------ item 15/22: epochs in the wrong unit


def _openai(start, end):
    return {"object": "page", "data": [{"object": "bucket", "start_time": start, "end_time": end, "results": [
        {"object": "organization.usage.completions.result", "input_tokens": 100, "output_tokens": 50,
         "num_model_requests": 2, "project_id": "proj", "model": "m"}]}]}


def test_openai_bucket_in_milliseconds_is_unmapped(tmp_path):
    """start_time 1790812800000 (ms of 2026-10-01) crashed with OverflowError; now row 1 says so."""
    r = import_files("openai", [write(tmp_path, "u.json", _openai(T0 * 1000, (T0 + 86400) * 1000))])
    assert r.rows() == 0
    assert reasons(r) == ["bucket start_time 1790812800000 is not in epoch seconds: it looks like milliseconds"]
    ok = import_files("openai", [write(tmp_path, "s.json", _openai(T0, T0 + 86400))])
    assert ok.frames["requests"]["ts"].to_list() == [datetime(2026, 10, 1, tzinfo=UTC)]


def _matrix(*series):
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t, v] for t, v in samples]} for labels, samples in series]}}


VLLM = {"model_name": "m", "namespace": "team", "pod": "srv"}


def test_prometheus_and_vllm_range_queries_in_milliseconds(tmp_path):
    """A range answer with ms times: both samples of each series are named, none imported."""
    util = ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1"}, [(T0 * 1000, "50"), ((T0 + 60) * 1000, "60")])
    r = import_files("prometheus", [write(tmp_path, "p.json", _matrix(util))], options=ImportOptions(step_s=60))
    assert r.rows() == 0
    assert reasons(r) == ["DCGM_FI_DEV_GPU_UTIL: 2 of 2 sample times are implausible: 1790812800000 is not in "
                          "epoch seconds: it looks like milliseconds; those samples are left out"]
    prompt = ({"__name__": "vllm:prompt_tokens_total", **VLLM}, [(T0 * 1000, "0"), ((T0 + 60) * 1000, "200")])
    r = import_files("vllm", [write(tmp_path, "v.json", _matrix(prompt))])
    assert r.rows() == 0
    assert "vllm:prompt_tokens_total: 2 of 2 sample times are implausible" in reasons(r)[0]
    assert "looks like milliseconds" in reasons(r)[0]


def test_kube_state_metrics_in_milliseconds(tmp_path):
    """kube-state-metrics series go through the same check before kube.py reads them."""
    phase = ({"__name__": "kube_pod_status_phase", "namespace": "team", "pod": "p", "phase": "Running"},
             [(T0 * 1000, "1")])
    r = import_files("prometheus", [write(tmp_path, "k.json", _matrix(phase))], options=ImportOptions(step_s=60))
    assert r.rows() == 0
    assert reasons(r) == ["kube_pod_status_phase: 1 of 1 sample times are implausible: 1790812800000 is not in "
                          "epoch seconds: it looks like milliseconds; those samples are left out"]


def test_text_exposition_with_seconds_and_openmetrics_with_milliseconds(tmp_path):
    """The Prometheus text format has ms: a scrape written with seconds (1790812800) reads as
    1790812.8 s; OpenMetrics has seconds: one written in ms is 1000 times too large."""
    text = f'DCGM_FI_DEV_GPU_UTIL{{UUID="GPU-1"}} 50 {T0}\n'
    r = import_files("prometheus", [write(tmp_path, "s.prom", text)], options=ImportOptions(step_s=60))
    assert reasons(r) == ["DCGM_FI_DEV_GPU_UTIL: 1 of 1 sample times are implausible: 1790812800 is not in epoch "
                          "milliseconds: it looks like seconds; those samples are left out"]
    om = f'DCGM_FI_DEV_GPU_UTIL{{UUID="GPU-1"}} 50 {T0 * 1000}\n# EOF\n'
    r = import_files("prometheus", [write(tmp_path, "m.om", om)], options=ImportOptions(step_s=60))
    assert "1790812800000 is not in epoch seconds: it looks like milliseconds" in reasons(r)[0]


def _span(start, end, **attrs):
    a = {"gen_ai.request.model": {"stringValue": "m"}, "gen_ai.usage.input_tokens": {"intValue": "10"},
         "gen_ai.usage.output_tokens": {"intValue": "5"}, **attrs}
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                               "scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8,
                                                          "startTimeUnixNano": start, "endTimeUnixNano": end,
                                                          "attributes": [{"key": k, "value": v}
                                                                         for k, v in a.items()]}]}]}]}


RID = "ab" * 16 + ":" + "cd" * 8


def test_otel_span_times_in_the_wrong_unit(tmp_path):
    """ns x 1000 crashed (OverflowError); ms in a ns field landed in 1970-01-01T00:29:50Z."""
    big = str(T0 * 10**12)
    r = import_files("otel", [write(tmp_path, "a.json", _span(big, str((T0 + 1) * 10**12)))])
    assert r.rows() == 0 and reasons(r)[0].startswith(f"span {RID}: startTimeUnixNano {big} in epoch nanoseconds is")
    r = import_files("otel", [write(tmp_path, "b.json", _span(str(T0 * 1000), str(T0 * 1000 + 1000)))])
    assert reasons(r) == [f"span {RID}: startTimeUnixNano 1790812800000 is not in epoch nanoseconds: it looks like "
                          "milliseconds"]


def test_litellm_epoch_in_milliseconds(tmp_path):
    """startTime 1790812800000 was rejected as 'not a timestamp'; now the unit is named.
    startTime 1790812800 (seconds), endTime 1790812802: 2000 ms of latency."""
    rec = {"request_id": "r1", "team_id": "t", "model": "m", "prompt_tokens": 10, "completion_tokens": 5,
           "startTime": T0 * 1000, "endTime": T0 * 1000 + 2000, "status": "success"}
    r = import_files("litellm", [write(tmp_path, "ms.json", [rec])])
    assert reasons(r) == ["request r1: startTime 1790812800000 is not in epoch seconds: it looks like milliseconds"]
    r = import_files("litellm", [write(tmp_path, "s.json", [{**rec, "startTime": T0, "endTime": T0 + 2}])])
    assert r.frames["requests"]["latency_ms"].to_list() == [2000.0]


def test_cli_start_in_milliseconds(tmp_path):
    out = CliRunner().invoke(import_cmd, ["vllm", "--url", "http://127.0.0.1:1", "--start", str(T0 * 1000),
                                          "--end", str(T0 + 3600), "--into", str(tmp_path / "b")])
    assert out.exit_code == 2
    assert "--start 1790812800000 is not in epoch seconds: it looks like milliseconds" in out.output


# ------------------------------------------------------------------ item 22: spans that end before they start


def test_reversed_spans_are_unmapped_in_every_importer(tmp_path):
    """endTime 00:00:00 is 1000 ms before startTime 00:00:01: the request's times cannot be
    trusted (it used to import with latency silently missing). Same for a span ending 1 s early,
    for a first token 500 ms before the start, and for an OpenAI bucket ending a day before it
    starts (bundle validation names it). Prometheus-fed formats sort their samples: no reversal."""
    rec = {"request_id": "r1", "team_id": "t", "model": "m", "prompt_tokens": 10, "completion_tokens": 5,
           "startTime": "2026-10-01T00:00:01Z", "endTime": "2026-10-01T00:00:00Z", "status": "success"}
    r = import_files("litellm", [write(tmp_path, "l.json", [rec])])
    assert r.rows() == 0
    assert reasons(r) == ["request r1: endTime '2026-10-01T00:00:00Z' is 1000 ms before startTime "
                          "'2026-10-01T00:00:01Z': its times cannot be trusted"]
    early = {**rec, "endTime": "2026-10-01T00:00:03Z", "completionStartTime": "2026-10-01T00:00:00.500Z"}
    r = import_files("litellm", [write(tmp_path, "f.json", [early])])
    assert reasons(r) == ["request r1: completionStartTime '2026-10-01T00:00:00.500Z' is 500 ms before startTime "
                          "'2026-10-01T00:00:01Z': its times cannot be trusted"]
    r = import_files("otel", [write(tmp_path, "o.json", _span(str((T0 + 1) * 10**9), str(T0 * 10**9)))])
    assert r.rows() == 0
    assert reasons(r) == [f"span {RID}: ends before it starts (endTimeUnixNano {T0 * 10**9} < startTimeUnixNano "
                          f"{(T0 + 1) * 10**9}, 1000 ms): its times cannot be trusted"]
    r = import_files("openai", [write(tmp_path, "u.json", _openai(T0 + 86400, T0))])
    assert reasons(r) == ["requests: end before ts (ts 2026-10-02T00:00:00Z, end 2026-10-01T00:00:00Z)"]


# ------------------------------------------------------------------ item 21: token counts that are no counts


@pytest.mark.parametrize("value, said", [(float("nan"), "is NaN, not a number"), (1.5, "is 1.5, not a whole number"),
                                         (True, "is true, not a number")])
def test_litellm_token_values_are_described(tmp_path, value, said):
    """They were reported as 'missing required input_tokens'."""
    rec = {"request_id": "r1", "team_id": "t", "model": "m", "prompt_tokens": value, "completion_tokens": 5,
           "startTime": "2026-10-01T00:00:01Z", "endTime": "2026-10-01T00:00:02Z", "status": "success"}
    path = tmp_path / "l.json"
    path.write_text(json.dumps([rec]).replace("NaN", "NaN"))  # json writes NaN for float("nan")
    r = import_files("litellm", [path])
    assert reasons(r) == [f"request r1: prompt_tokens {said}"]
    day = {"date": "2026-10-01", "team_id": "t", "model": "m", "prompt_tokens": 10, "completion_tokens": value,
           "successful_requests": 1}
    r = import_files("litellm", [write(tmp_path, "d.json", [day])])
    assert reasons(r) == [f"daily row 2026-10-01: completion_tokens {said}"]


def test_openai_and_otel_token_values_are_described(tmp_path):
    doc = _openai(T0, T0 + 86400)
    doc["data"][0]["results"][0]["output_tokens"] = 2.5
    r = import_files("openai", [write(tmp_path, "u.json", doc)])
    assert reasons(r) == ["usage of m for proj: output_tokens is 2.5, not a whole number"]
    span = _span(str(T0 * 10**9), str((T0 + 1) * 10**9), **{"gen_ai.usage.input_tokens": {"boolValue": True}})
    r = import_files("otel", [write(tmp_path, "b.json", span)])
    assert reasons(r) == [f"span {RID}: gen_ai.usage.input_tokens is true, not a number"]
    span = _span(str(T0 * 10**9), str((T0 + 1) * 10**9), **{"gen_ai.usage.output_tokens": {"doubleValue": "NaN"}})
    r = import_files("otel", [write(tmp_path, "n.json", span)])
    assert reasons(r) == [f"span {RID}: gen_ai.usage.output_tokens is NaN, not a number"]


# ------------------------------------------------------------------ item 7: counter readings below zero


def test_vllm_reading_below_zero_is_never_a_base(tmp_path):
    """prompt 0, -150, 200 at 00:00, 00:01, 00:02; output 0, 10, 20; finished requests 0, 1, 2.

    Before: -150 was a reset (increase -150, rejected for a negative count) and the next interval
    rose by 200 - (-150) = 350. Now the -150 is left out (held at the reading before, 0): prompt
    rises 0 in [00:00, 00:01) and 200 in [00:01, 00:02): 200 prompt tokens in all, as the
    counter says; output 10 + 10 = 20; the reason names the reading."""
    series = [({"__name__": "vllm:prompt_tokens_total", **VLLM}, [(T0, "0"), (T0 + 60, "-150"), (T0 + 120, "200")]),
              ({"__name__": "vllm:generation_tokens_total", **VLLM}, [(T0, "0"), (T0 + 60, "10"), (T0 + 120, "20")]),
              ({"__name__": "vllm:request_success_total", **VLLM}, [(T0, "0"), (T0 + 60, "1"), (T0 + 120, "2")])]
    r = import_files("vllm", [write(tmp_path, "v.json", _matrix(*series))])
    req = r.frames["requests"]
    assert req["input_tokens"].to_list() == [0, 200]
    assert req["input_tokens"].sum() == 200 and req["output_tokens"].sum() == 20
    assert reasons(r) == ["vllm:prompt_tokens_total (m): 1 readings below zero (first -150 at 2026-10-01T00:01:00Z): "
                          "a counter never reads below zero; each is left out (the counter taken not to move there)"]


def test_dcgm_counters_below_zero_are_left_missing(tmp_path):
    """Energy counter (mJ) 1000000, -5, 1120000 at 00:00, 00:01, 00:02: the middle reading is
    left missing (the telemetry row keeps its utilization); the energies are 1000 J and 1120 J.
    A DBE counter -1 then 0 is no rise: no degraded_hardware event."""
    uuid = {"UUID": "GPU-1"}
    times = [T0, T0 + 60, T0 + 120]
    series = [({"__name__": "DCGM_FI_DEV_GPU_UTIL", **uuid}, [(t, "50") for t in times]),
              ({"__name__": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **uuid},
               list(zip(times, ["1000000", "-5", "1120000"]))),
              ({"__name__": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **uuid}, list(zip(times, ["-1", "0", "0"])))]
    r = import_files("prometheus", [write(tmp_path, "d.json", _matrix(*series))], options=ImportOptions(step_s=60))
    tele = r.frames["telemetry"]
    assert tele["util_pct"].to_list() == [50.0, 50.0, 50.0]
    assert tele["energy_j"].to_list() == [1000.0, None, 1120.0]
    assert "events" not in r.frames or r.frames["events"].height == 0
    assert reasons(r) == [
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION on GPU-1: 1 readings below zero (first -5 at 2026-10-01T00:01:00Z): "
        "a counter never reads below zero; left missing",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL on GPU-1: 1 readings below zero (first -1 at 2026-10-01T00:00:00Z): "
        "a counter never reads below zero; left missing",
    ]
