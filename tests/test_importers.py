"""Importers on fixtures written from each format's documentation: exact canonical rows,
cached-token conversion, and every unmapped row with its reason."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine.bundle import read_bundle
from cost_engine.config import parse_config
from cost_engine.import_cli import import_cmd
from cost_engine.importers import (
    FORMATS,
    ImportFailed,
    ImportOptions,
    gpu_map_from_inventory,
    import_files,
    write_bundle,
)
from cost_engine.importers.slurm import expand_hostlist, gpu_count, gpu_indices, queue_reason

FIX = Path(__file__).parent / "fixtures" / "importers"
UTC = timezone.utc
UTC_CONFIG = parse_config({"period": {"source_timezone": "UTC"}})


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def rows(frame: pl.DataFrame, cols: list[str]) -> list[dict]:
    return frame.select(cols).to_dicts()


def unmapped(result) -> list[tuple]:
    return [(r["file"], r["row"], r["reason"]) for r in result.unmapped.iter_rows(named=True)]


def test_registry_has_every_format():
    assert set(FORMATS) == {"slurm", "prometheus", "vllm", "litellm", "openai", "otel"}
    with pytest.raises(ValueError, match="unknown import format"):
        import_files("nope", [FIX / "sacct.txt"])


# ------------------------------------------------------------------------------------------- slurm


def test_hostlist_and_tres_parsing():
    assert expand_hostlist("gpu[001-004]") == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert expand_hostlist("gpu[001-002,005],cpu1") == ["gpu001", "gpu002", "gpu005", "cpu1"]
    assert expand_hostlist("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert expand_hostlist("None assigned") == []
    assert gpu_count("billing=32,cpu=32,gres/gpu=4,mem=256G,node=1") == (4, None)
    assert gpu_count("cpu=8,gres/gpu:a100=2,gres/gpu:h100=2") == (4, None)
    assert gpu_count("cpu=8,gres/gpu=2,gres/gpu:h100=2") == (2, "h100")
    assert gpu_count("cpu=8,mem=16G") == (None, None)
    assert gpu_indices("gpu:a100:4(IDX:0-1,3,6)") == [0, 1, 3, 6]
    assert [queue_reason(r) for r in ("QOSMaxGRESPerUser", "AssocGrpGRES", "Resources", "Priority",
                                      "DependencyNeverSatisfied", "ReqNodeNotAvail")] == \
        ["quota", "quota", "resources", "priority", "dependency", "other"]


def test_slurm_allocations_queue_and_unmapped():
    r = import_files("slurm", [FIX / "sacct.txt"], UTC_CONFIG,
                     options=ImportOptions(end_at=t("2026-10-01T14:00:00Z")))
    cols = ["allocation_id", "gpu_id", "start", "end", "owner", "source", "job_id", "requested_gpus"]
    a = rows(r.frames["allocations"], cols)

    def alloc(job, node, i, start, end, owner, req, k=None):  # k: the job's k-th card on the node (the id)
        return {"allocation_id": f"slurm:{job}:{node}:{i if k is None else k}", "gpu_id": f"{node}:gpu{i}",
                "start": t(start),
                "end": t(end), "owner": owner, "source": "scheduler", "job_id": job, "requested_gpus": req}

    assert a == [
        *(alloc("1001", "gpu001", i, "2026-10-01T08:00:00Z", "2026-10-01T12:00:00Z", "acct_llm", 4.0) for i in range(4)),
        *(alloc("1002", n, i, "2026-10-01T10:00:00Z", "2026-10-01T11:30:00Z", "acct_vision", 4.0)
          for n in ("gpu002", "gpu003") for i in range(2)),
        # running job: ends at the export time; gpu0-3 of gpu001 are still held by 1001 then
        *(alloc("1003", "gpu001", i, "2026-10-01T11:00:00Z", "2026-10-01T14:00:00Z", "acct_llm", 2.0, k)
          for k, i in enumerate((4, 5))),
    ]
    q = rows(r.frames["queue"], ["job_id", "owner", "pool", "gpus", "submit", "start", "reason"])
    assert q == [
        {"job_id": "1002", "owner": "acct_vision", "pool": "gpu", "gpus": 4.0, "submit": t("2026-10-01T09:00:00Z"),
         "start": t("2026-10-01T10:00:00Z"), "reason": "quota"},
        {"job_id": "1004", "owner": "acct_vision", "pool": "gpu", "gpus": 8.0, "submit": t("2026-10-01T11:00:00Z"),
         "start": None, "reason": "quota"},
        {"job_id": "1005", "owner": "acct_llm", "pool": "gpu", "gpus": 8.0, "submit": t("2026-10-01T11:05:00Z"),
         "start": None, "reason": "resources"},
        # cancelled while pending: it waited until its End
        {"job_id": "1010", "owner": "acct_vision", "pool": "gpu", "gpus": 2.0, "submit": t("2026-10-01T12:00:00Z"),
         "start": t("2026-10-01T12:30:00Z"), "reason": "priority"},
    ]
    assert unmapped(r) == [
        ("sacct.txt", 10, "job 1007: 3 GPUs do not split evenly over 2 nodes"),
        ("sacct.txt", 11, "allocations: missing required owner"),
        ("sacct.txt", 12, "allocations: end before start (start 2026-10-01T13:00:00Z, end 2026-10-01T12:00:00Z)"),
    ]
    assert ("slurm job steps", "2 job step lines skipped (their job's line carries the GPUs)") in r.notes
    assert ("slurm jobs without GPUs", "1 jobs request no GPUs and were skipped") in r.notes


def test_slurm_running_job_without_export_time_is_unmapped():
    r = import_files("slurm", [FIX / "sacct.txt"], UTC_CONFIG)
    assert ("sacct.txt", 6, "job 1003 (RUNNING) has End Unknown: give the export time (--end-at) to end running "
            "jobs there") in unmapped(r)
    assert "1003" not in r.frames["allocations"]["job_id"].to_list()


def test_slurm_offsetless_times_need_source_timezone():
    r = import_files("slurm", [FIX / "sacct_noheader.txt"])  # no source_timezone in the config
    assert r.frames["allocations"].height == 0
    assert {why for _, _, why in unmapped(r)} == {
        "allocations: start timestamp without offset '2026-10-01T00:00:00' (add Z or +hh:mm, or set "
        "period.source_timezone); end timestamp without offset '2026-10-01T06:00:00' (add Z or +hh:mm, or set "
        "period.source_timezone)",
        "allocations: start timestamp without offset '2026-10-01T03:00:00' (add Z or +hh:mm, or set "
        "period.source_timezone); end timestamp without offset '2026-10-01T04:00:00' (add Z or +hh:mm, or set "
        "period.source_timezone)",
    }


def test_slurm_without_header_and_inventory_gpu_map():
    inv = pl.DataFrame({"gpu_id": ["GPU-a", "GPU-b"], "pool": ["p", "p"], "node": ["gpu01", "gpu03"],
                        "index": ["0", "0"]})
    gmap = gpu_map_from_inventory(inv)
    assert gmap == {("gpu01", 0): "GPU-a", ("gpu03", 0): "GPU-b"}
    r = import_files("slurm", [FIX / "sacct_noheader.txt"], UTC_CONFIG, options=ImportOptions(gpu_map=gmap))
    a = r.frames["allocations"]
    assert a["gpu_id"].to_list() == ["GPU-a", "gpu01:gpu1", "gpu01:gpu2", "gpu01:gpu3",
                                     "gpu02:gpu0", "gpu02:gpu1", "gpu02:gpu2", "gpu02:gpu3", "GPU-b"]
    # TIMEOUT job 2002 asked for 2 GPUs and got 1
    last = a.row(-1, named=True)
    assert (last["owner"], last["requested_gpus"], last["start"], last["end"]) == \
        ("acct_vision", 2.0, t("2026-10-01T03:00:00Z"), t("2026-10-01T04:00:00Z"))
    assert r.unmapped.height == 0


def test_slurm_explicit_gpu_indices(tmp_path):
    f = tmp_path / "sacct.txt"
    f.write_text(
        "JobID|Account|Start|End|State|AllocTRES|NodeList|Gres\n"
        "1|a|2026-10-01T00:00:00Z|2026-10-01T01:00:00Z|COMPLETED|gres/gpu=2|n1|gpu:2(IDX:5,7)\n"
        "2|a|2026-10-01T00:00:00Z|2026-10-01T01:00:00Z|COMPLETED|gres/gpu=2|n1|gpu:2(IDX:0-2)\n"
    )
    r = import_files("slurm", [f])
    assert r.frames["allocations"]["gpu_id"].to_list() == ["n1:gpu5", "n1:gpu7"]
    assert unmapped(r) == [("sacct.txt", 3, "job 2: IDX lists 3 GPUs, AllocTRES 2 per node")]


def test_not_a_sacct_file(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("hello,world\n1,2\n")
    with pytest.raises(ImportFailed, match="not a '|'-separated sacct"):
        import_files("slurm", [f])


# ------------------------------------------------------------------------------------------- prometheus

GPU_A = "GPU-5d3b9c1e-0000-4000-8000-00000000000a"
GPU_B = "GPU-5d3b9c1e-0000-4000-8000-00000000000b"
GPU_C = "GPU-5d3b9c1e-0000-4000-8000-00000000000c"


def test_prometheus_dcgm_range_query():
    r = import_files("prometheus", [FIX / "dcgm_range.json"], options=ImportOptions(pool="h100"))
    tel = rows(r.frames["telemetry"], ["ts", "gpu_id", "util_pct", "power_w", "energy_j", "mem_used_mib"])
    mig = f"{GPU_B}/2"
    assert tel == [
        {"ts": t("2026-10-01T00:00:00Z"), "gpu_id": GPU_A, "util_pct": 87.0, "power_w": 612.5, "energy_j": 1_000_000.0,
         "mem_used_mib": 61234.0},
        {"ts": t("2026-10-01T00:01:00Z"), "gpu_id": GPU_A, "util_pct": 90.0, "power_w": 640.25,
         "energy_j": 1_036_750.0, "mem_used_mib": 61240.0},
        # 00:02: utilization NaN -> no row (reported)
        {"ts": t("2026-10-01T00:03:00Z"), "gpu_id": GPU_A, "util_pct": 0.0, "power_w": 71.5, "energy_j": 1_111_045.0,
         "mem_used_mib": None},
        {"ts": t("2026-10-01T00:04:00Z"), "gpu_id": GPU_A, "util_pct": 0.0, "power_w": 70.0, "energy_j": 1_115_335.0,
         "mem_used_mib": None},
        *({"ts": t(f"2026-10-01T00:0{i}:00Z"), "gpu_id": mig, "util_pct": u, "power_w": None, "energy_j": None,
           "mem_used_mib": 20480.0} for i, u in enumerate([50.0, 25.0, 75.0, 50.0, 0.0])),
    ]
    assert rows(r.frames["allocations"], ["allocation_id", "gpu_id", "start", "end", "owner", "source", "job_id"]) == [
        {"allocation_id": f"k8s:team-a/train-0:{GPU_A}:20261001T000000Z", "gpu_id": GPU_A,
         "start": t("2026-10-01T00:00:00Z"), "end": t("2026-10-01T00:03:00Z"), "owner": "team-a",
         "source": "kubernetes", "job_id": "train-0"},
        {"allocation_id": f"k8s:team-b/serve-7f9c:{mig}:20261001T000000Z", "gpu_id": mig,
         "start": t("2026-10-01T00:00:00Z"), "end": t("2026-10-01T00:05:00Z"), "owner": "team-b",
         "source": "kubernetes", "job_id": "serve-7f9c"},
    ]
    # The exporter's own pod (gpu-operator/nvidia-dcgm-exporter) is not an allocation.
    assert "gpu-operator" not in r.frames["allocations"]["owner"].to_list()
    assert rows(r.frames["events"], ["start", "end", "kind", "gpu_id"]) == [
        {"start": t("2026-10-01T00:02:00Z"), "end": t("2026-10-01T00:03:00Z"), "kind": "degraded_hardware",
         "gpu_id": GPU_A},  # XID 79 (fell off the bus)
        {"start": t("2026-10-01T00:01:00Z"), "end": t("2026-10-01T00:03:00Z"), "kind": "degraded_hardware",
         "gpu_id": GPU_A},  # HW slowdown clock-event reason (0x8) at 00:01 and 00:02
    ]
    inv = rows(r.frames["inventory"], ["gpu_id", "pool", "node", "accelerator", "capacity", "index"])
    assert inv == [
        {"gpu_id": GPU_A, "pool": "h100", "node": "node-a", "accelerator": "NVIDIA H100 80GB HBM3", "capacity": 1.0,
         "index": "0"},
        {"gpu_id": mig, "pool": "h100", "node": "node-a", "accelerator": "NVIDIA H100 80GB HBM3", "capacity": 3 / 7,
         "index": "1/2"},
        {"gpu_id": GPU_C, "pool": "h100", "node": "node-b", "accelerator": "NVIDIA H100 80GB HBM3", "capacity": 1.0,
         "index": "2"},
    ]
    assert unmapped(r) == [
        ("dcgm_range.json", 1, f"DCGM_FI_DEV_GPU_UTIL on {GPU_A}: 1 of 3 values are NaN or not numbers "
         "(first at 2026-10-01T00:02:00Z); left missing"),
        ("dcgm_range.json", 1, f"{GPU_A}: 1 samples without utilization (first at 2026-10-01T00:02:00Z); telemetry "
         "needs util_pct, so their power, energy and memory are not imported"),
        ("dcgm_range.json", 10, f"XID 13 on {GPU_A} at 2026-10-01T00:04:00Z is an application fault, not a hardware "
         "one: no event"),
        ("dcgm_range.json", 13, "DCGM_FI_DEV_GPU_UTIL: series has no UUID label and no Hostname + gpu labels"),
        ("dcgm_range.json", 14, f"{GPU_C}: 2 samples without utilization (first at 2026-10-01T00:00:00Z); telemetry "
         "needs util_pct, so their power, energy and memory are not imported"),
    ]
    # A DCGM field the ledger does not use is listed once as ignored on purpose, not unmapped.
    assert r.ignored == [("DCGM fields not used for cost", ["DCGM_FI_DEV_SM_CLOCK"])]
    assert ("capacity without an owner", "1 of 3 cards carry no workload pod label (no exported_pod / pod of a "
            "workload): no allocation, their time is unallocated capacity") in r.notes


def test_prometheus_without_pool_writes_no_inventory():
    r = import_files("prometheus", [FIX / "dcgm_range.json"])
    assert "inventory" not in r.frames
    assert ("inventory not written", "3 of 3 cards seen have no pool; give --pool (or --pool-label, a node label) "
            "to write them as inventory (with MIG capacities)") in r.notes


def test_prometheus_query_error(tmp_path):
    f = tmp_path / "err.json"
    f.write_text('{"status": "error", "errorType": "bad_data", "error": "parse error"}')
    with pytest.raises(ImportFailed, match="the query failed: bad_data: parse error"):
        import_files("prometheus", [f])


# ------------------------------------------------------------------------------------------- vllm


def test_vllm_counters_to_buckets():
    r = import_files("vllm", [FIX / "vllm_range.json"])
    cols = ["request_id", "ts", "end", "owner", "source", "model", "input_tokens", "cached_input_tokens",
            "output_tokens", "requests", "prefill_ms", "decode_ms", "status"]
    m = "meta-llama/Llama-3.1-8B-Instruct"
    srv = "team-b/vllm-0"  # namespace/pod: stable across restarts, unlike the instance address

    def b(t0, t1, epoch, inp, cached, out, req, pre, dec):
        return {"request_id": f"vllm:{srv}:{m}:{epoch}", "ts": t(t0), "end": t(t1), "owner": "team-b",
                "source": "kubernetes",
                "model": m, "input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
                "requests": req, "prefill_ms": pre, "decode_ms": dec, "status": "ok"}

    assert rows(r.frames["requests"], cols) == [
        # prompt 1000->1600 includes 200 cached: input 400
        b("2026-10-01T00:00:00Z", "2026-10-01T00:01:00Z", 1790812800, 400, 200, 200, 2, 500.0, 4000.0),
        # finished_reason stop +3 and length +1 are summed
        b("2026-10-01T00:01:00Z", "2026-10-01T00:02:00Z", 1790812860, 700, 300, 400, 4, 1000.0, 8000.0),
        # counter reset (server restart): the increase is the new value
        b("2026-10-01T00:02:00Z", "2026-10-01T00:03:00Z", 1790812920, 300, 0, 100, 1, 250.0, 2000.0),
        # 00:03-00:04 finished no request: merged into the next interval
        b("2026-10-01T00:03:00Z", "2026-10-01T00:05:00Z", 1790812980, 1100, 100, 550, 2, 500.0, 6000.0),
    ]
    assert unmapped(r) == [
        ("vllm_range.json", 1, f"{m} on {srv}: 300 prompt and 50 output tokens after the last finished request "
         "(from 2026-10-01T00:05:00Z): no bucket"),
        ("vllm_range.json", 11, "vllm:generation_tokens_total: series has no model_name label"),
    ]
    assert r.ignored == [("not token usage (gauges, histograms, the server's own metrics)",
                          ["process_cpu_seconds_total", "vllm:num_requests_running"])]


# ------------------------------------------------------------------------------------------- litellm


def test_litellm_spend_logs_and_daily_table():
    r = import_files("litellm", [FIX / "litellm_spend_logs.json", FIX / "litellm_daily_team_spend.csv"])
    cols = ["request_id", "ts", "owner", "source", "model", "input_tokens", "cached_input_tokens", "output_tokens",
            "status", "ttft_ms", "latency_ms", "requests", "end"]
    key_b = "4b1f0c2a9d6e8f7a3c5b2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"
    key_a = "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b"
    daily = f"litellm-daily:team-a:{key_a}:llama-3.1-8b:2026-10-01"
    common = {"source": "litellm"}
    assert rows(r.frames["requests"], cols) == [
        # prompt_tokens 1200 include 1000 cached (metadata.usage_object.prompt_tokens_details.cached_tokens)
        {"request_id": "chatcmpl-9f1c2b7e-1", "ts": t("2026-10-01T10:00:00Z"), "owner": "team-a", **common,
         "model": "llama-3.1-8b", "input_tokens": 200, "cached_input_tokens": 1000, "output_tokens": 300,
         "status": "ok", "ttft_ms": 250.0, "latency_ms": 2500.0, "requests": 1, "end": None},
        # no team: the api_key is the owner; metadata as JSON text; failure -> error
        {"request_id": "chatcmpl-9f1c2b7e-2", "ts": t("2026-10-01T10:05:00Z"), "owner": key_b, **common,
         "model": "gpt-4o-mini", "input_tokens": 30, "cached_input_tokens": 20, "output_tokens": 10,
         "status": "error", "ttft_ms": 30000.0, "latency_ms": 30000.0, "requests": 1, "end": None},
        {"request_id": daily, "ts": t("2026-10-01T00:00:00Z"), "owner": "team-a", **common, "model": "llama-3.1-8b",
         "input_tokens": 6000, "cached_input_tokens": 4000, "output_tokens": 2000, "status": "ok", "ttft_ms": None,
         "latency_ms": None, "requests": 18, "end": t("2026-10-02T00:00:00Z")},
        {"request_id": daily + ":failed", "ts": t("2026-10-01T00:00:00Z"), "owner": "team-a", **common,
         "model": "llama-3.1-8b", "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "status": "error",
         "ttft_ms": None, "latency_ms": None, "requests": 2, "end": t("2026-10-02T00:00:00Z")},
    ]
    assert unmapped(r) == [
        ("litellm_daily_team_spend.csv", 3, "daily row 2026-10-02: cache_read_input_tokens (500) exceed prompt_tokens "
         "(300); prompt_tokens should include them"),
        ("litellm_spend_logs.json", 3, "request chatcmpl-9f1c2b7e-3: cached tokens (500) exceed prompt_tokens (100); "
         "prompt_tokens should include them"),
        ("litellm_spend_logs.json", 4, "requests: missing required ts"),
    ]
    assert ("litellm owner", "1 spend log rows have no team_id: their owner is the api_key") in r.notes


def test_litellm_owner_by_api_key_and_csv_export(tmp_path):
    f = tmp_path / "spend.csv"
    f.write_text(
        "request_id,api_key,team_id,model,prompt_tokens,completion_tokens,startTime,endTime,completionStartTime,"
        "status,metadata\n"
        'r1,sk-hash-1,team-a,gpt-4o,100,7,2026-10-01T00:00:00Z,2026-10-01T00:00:01Z,,success,'
        '"{""usage_object"": {""cache_read_input_tokens"": 60}}"\n'
    )
    r = import_files("litellm", [f], options=ImportOptions(owner_by="api_key"))
    assert rows(r.frames["requests"], ["owner", "input_tokens", "cached_input_tokens", "ttft_ms", "latency_ms"]) == [
        {"owner": "sk-hash-1", "input_tokens": 40, "cached_input_tokens": 60, "ttft_ms": None, "latency_ms": 1000.0}
    ]


# ------------------------------------------------------------------------------------------- openai


def test_openai_usage_and_costs():
    r = import_files("openai", [FIX / "openai_usage_completions.json", FIX / "openai_costs.json"])
    cols = ["request_id", "ts", "end", "owner", "source", "model", "input_tokens", "cached_input_tokens",
            "output_tokens", "requests"]
    assert rows(r.frames["requests"], cols) == [
        # input_tokens 5000 include 1000 cached
        {"request_id": "openai:1790812800:proj_abc:gpt-4o-mini-2024-07-18:key_1:-:false",
         "ts": t("2026-10-01T00:00:00Z"), "end": t("2026-10-02T00:00:00Z"), "owner": "proj_abc", "source": "openai",
         "model": "gpt-4o-mini-2024-07-18", "input_tokens": 4000, "cached_input_tokens": 1000, "output_tokens": 800,
         "requests": 12},
        {"request_id": "openai:1790899200:proj_xyz:gpt-4o-2024-08-06:key_9:-:true", "ts": t("2026-10-02T00:00:00Z"),
         "end": t("2026-10-03T00:00:00Z"), "owner": "proj_xyz", "source": "openai", "model": "gpt-4o-2024-08-06",
         "input_tokens": 64000, "cached_input_tokens": 0, "output_tokens": 12000, "requests": 40},
    ]
    cols = ["cost_id", "category", "amount", "currency", "start", "end", "owner", "source"]
    day = {"start": t("2026-10-01T00:00:00Z"), "end": t("2026-10-02T00:00:00Z")}
    assert rows(r.frames["costs"], cols) == [
        {"cost_id": "openai:1790812800:proj_abc:gpt-4o-mini-2024-07-18, input", "category": "api_fees", "amount": 0.06,
         "currency": "USD", **day, "owner": "proj_abc", "source": "openai"},
        {"cost_id": "openai:1790812800:proj_abc:gpt-4o-mini-2024-07-18, output", "category": "api_fees",
         "amount": 0.048, "currency": "USD", **day, "owner": "proj_abc", "source": "openai"},
        {"cost_id": "openai:1790899200:proj_xyz:gpt-4o-2024-08-06, batch input", "category": "api_fees", "amount": 0.5,
         "currency": "USD", "start": t("2026-10-02T00:00:00Z"), "end": t("2026-10-03T00:00:00Z"), "owner": "proj_xyz",
         "source": "openai"},
    ]
    assert unmapped(r) == [
        ("openai_costs.json", 3, "cost of 1.2 USD without project_id: query with group_by=project_id, or name the "
         "owner with --owner (an api_fees cost needs one)"),
        ("openai_usage_completions.json", 2, "usage without project_id: query with group_by=project_id,model"),
        ("openai_usage_completions.json", 3, "input_cached_tokens (500) exceed input_tokens (300); input_tokens "
         "should include them"),
    ]


# ------------------------------------------------------------------------------------------- otel


def test_otel_genai_spans():
    r = import_files("otel", [FIX / "otel_genai_spans.json"])
    cols = ["request_id", "ts", "owner", "source", "model", "input_tokens", "cached_input_tokens", "output_tokens",
            "status", "latency_ms"]
    trace = "5b8efff798038103d269b633813fc60c"
    assert rows(r.frames["requests"], cols) == [
        # input 1500 includes 1024 cache_read; response model wins over request model
        {"request_id": f"{trace}:eee19b7ec3c1b173", "ts": t("2026-10-01T10:00:00.500Z"), "owner": "support-frontend",
         "source": "otel", "model": "gpt-4o-2024-08-06", "input_tokens": 476, "cached_input_tokens": 1024,
         "output_tokens": 200, "status": "ok", "latency_ms": 3750.0},
        # deprecated prompt/completion names; status ERROR with error.type timeout
        {"request_id": f"{trace}:eee19b7ec3c1b176", "ts": t("2026-10-01T10:00:05Z"), "owner": "support-frontend",
         "source": "otel", "model": "gpt-3.5-turbo", "input_tokens": 40, "cached_input_tokens": 0,
         "output_tokens": 12, "status": "timeout", "latency_ms": 30000.0},
        {"request_id": f"{trace}:eee19b7ec3c1b178", "ts": t("2026-10-01T10:00:08Z"), "owner": "support-frontend",
         "source": "otel", "model": "text-embedding-3-small", "input_tokens": 37, "cached_input_tokens": 0,
         "output_tokens": 0, "status": "ok", "latency_ms": 125.0},
    ]
    assert unmapped(r) == [
        ("otel_genai_spans.json", 5, f"span {trace}:eee19b7ec3c1b177: no gen_ai.usage.output_tokens"),
        ("otel_genai_spans.json", 7, f"span {trace}:eee19b7ec3c1b179: cache_read tokens (900) exceed input_tokens "
         "(20); input_tokens should include them"),
    ]
    assert ("otel spans", "1 spans without gen_ai attributes skipped") in r.notes
    assert ("otel spans", "1 agent/tool spans skipped (their model calls are spans of their own)") in r.notes


def test_otel_owner_attribute():
    r = import_files("otel", [FIX / "otel_genai_spans.json"],
                     options=ImportOptions(owner_attribute="deployment.environment.name"))
    assert set(r.frames["requests"]["owner"].to_list()) == {"prod"}


# ------------------------------------------------------------------------------------------- writing, CLI


def test_write_bundle_is_idempotent_and_refuses_conflicts(tmp_path):
    opts = ImportOptions(end_at=t("2026-10-01T14:00:00Z"))
    r = import_files("slurm", [FIX / "sacct.txt"], UTC_CONFIG, options=opts)
    writes = write_bundle(r, tmp_path, UTC_CONFIG)
    assert [(w.file, w.added) for w in writes] == [("allocations.csv", 10), ("queue.csv", 4)]
    again = write_bundle(r, tmp_path, UTC_CONFIG)
    assert [(w.added, w.unchanged) for w in again] == [(0, 10), (0, 4)]
    b = read_bundle(tmp_path, UTC_CONFIG)
    assert b["allocations"].height == 10 and b.rejected.height == 0
    later = import_files("slurm", [FIX / "sacct.txt"], UTC_CONFIG,
                         options=ImportOptions(end_at=t("2026-10-01T15:00:00Z")))
    from cost_engine.importers import BundleConflict

    with pytest.raises(BundleConflict, match="allocation_id slurm:1003:gpu001:0"):
        write_bundle(later, tmp_path, UTC_CONFIG)
    replaced = write_bundle(later, tmp_path, UTC_CONFIG, replace=True)
    assert replaced[0].replaced == 2
    b = read_bundle(tmp_path, UTC_CONFIG)
    assert b["allocations"].filter(pl.col("job_id") == "1003")["end"].unique().to_list() == [t("2026-10-01T15:00:00Z")]


def test_cli_import_prints_counts_and_every_unmapped_row(tmp_path):
    """sacct.txt gives 10 allocation and 4 queue rows and leaves 3 records out: a partial import,
    exit 0 with the count; with --strict the same is an error (exit 1) and nothing is written."""
    (tmp_path / "ailedger.toml").write_text('[period]\nsource_timezone = "UTC"\n')
    args = ["slurm", str(FIX / "sacct.txt"), "--into", str(tmp_path), "--end-at", "2026-10-01T14:00:00Z"]
    res = CliRunner().invoke(import_cmd, [*args, "--strict"])
    assert res.exit_code == 1, res.output
    assert "  allocations          10 rows" in res.output
    assert "  queue                 4 rows" in res.output
    assert "unmapped (3):" in res.output
    assert "  sacct.txt row 10: job 1007: 3 GPUs do not split evenly over 2 nodes" in res.output
    assert "  sacct.txt row 11: allocations: missing required owner" in res.output
    assert "error: 3 input records could not be mapped and --strict is set: nothing written" in res.output
    assert not (tmp_path / "allocations.csv").exists()
    res = CliRunner().invoke(import_cmd, args)
    assert res.exit_code == 0, res.output
    assert "wrote allocations.csv: 10 added, 0 unchanged, 0 replaced" in res.output
    assert "partial import: 14 rows imported, 3 input records could not be mapped (listed above)" in res.output


def test_cli_import_into_store(tmp_path):
    from cost_engine import store

    db = tmp_path / "fleet.duckdb"
    res = CliRunner().invoke(import_cmd, ["openai", str(FIX / "openai_usage_completions.json"),
                                          str(FIX / "openai_costs.json"), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "ingest 1: 5 inserted" in res.output
    b = store.load_bundle(db)
    assert b["requests"].height == 2 and b["costs"].height == 3
    assert b.rejected.height == 3  # the unmapped rows travel as the store's rejections
    res = CliRunner().invoke(import_cmd, ["openai", str(FIX / "openai_costs.json"), "--db", str(db)])
    assert "0 inserted, 3 unchanged" in res.output


def test_cli_import_needs_one_target():
    res = CliRunner().invoke(import_cmd, ["otel", str(FIX / "otel_genai_spans.json")])
    assert res.exit_code == 2
    assert "give exactly one of --into BUNDLE_DIR or --db FILE" in res.output


# ------------------------------------------------------------------------------------------- issue 21: forms and seams


def test_slurm_header_forms(tmp_path):
    """The same job in the forms sacct prints: a header starting with JobIDRaw (read as header-less
    before, nothing imported), fields in another order, --parsable's trailing '|', steps present
    (no -X), AllocTRES with only gres/gpu:a100=2 and billing, State "CANCELLED by 19032". Each
    gives 2 allocations of job 7 on n1 for [00:00, 02:00): 4 GPU-hours."""
    rows = {
        "jobidraw_first": "JobIDRaw|JobID|Account|Start|End|State|AllocTRES|NodeList\n"
                          "7|7|acct|2026-10-01T00:00:00|2026-10-01T02:00:00|CANCELLED by 19032|"
                          "billing=16,cpu=16,gres/gpu:a100=2,mem=64G,node=1|n1\n",
        "reordered": "NodeList|AllocTRES|End|Start|Account|JobID\n"
                     "n1|gres/gpu:a100=2,billing=16|2026-10-01T02:00:00|2026-10-01T00:00:00|acct|7\n",
        "parsable_with_steps": "JobID|Account|Start|End|State|AllocTRES|NodeList|\n"
                               "7|acct|2026-10-01T00:00:00|2026-10-01T02:00:00|COMPLETED|gres/gpu=2,cpu=4|n1|\n"
                               "7.batch|acct|2026-10-01T00:00:00|2026-10-01T02:00:00|COMPLETED|cpu=4,gres/gpu=2|n1|\n"
                               "7.0|acct|2026-10-01T00:00:00|Unknown|RUNNING|gres/gpu=2|n1|\n",
    }
    for name, text in rows.items():
        f = tmp_path / f"{name}.txt"
        f.write_text(text)
        r = import_files("slurm", [f], UTC_CONFIG)
        a = r.frames["allocations"]
        assert a.select("allocation_id", "job_id", "owner").rows() == [
            ("slurm:7:n1:0", "7", "acct"), ("slurm:7:n1:1", "7", "acct")], name
        hours = sum((e - s).total_seconds() / 3600 for s, e in a.select("start", "end").iter_rows())
        assert hours == 4.0, name
        assert r.unmapped.height == 0, name
    f = tmp_path / "noheader.txt"  # --noheader with the --format order given as --columns
    f.write_text("7|acct|gpu|None|Unknown|PENDING|gres/gpu=2|None assigned|2026-10-01T00:00:00\n")
    r = import_files("slurm", [f], UTC_CONFIG,
                     options=ImportOptions(columns=["JobIDRaw", "Account", "Partition", "Start", "End", "State",
                                                    "ReqTRES", "NodeList", "Submit"]))
    assert r.frames["queue"].select("job_id", "pool", "gpus", "submit", "start").rows() == [
        ("7", "gpu", 2.0, t("2026-10-01T00:00:00Z"), None)]


def test_openai_sdk_result_shape_and_other_usage_kinds(tmp_path):
    """A list of buckets whose results sit under `result` (the SDK's page): a completions result
    of 1000 input incl. 400 cached -> 600 + 400 cached, 500 output, 5 requests; an embeddings
    result (16 input, 2 requests) -> output 0; moderations likewise; an audio result is not tokens
    (ignored, listed once)."""
    f = tmp_path / "usage.json"
    f.write_text(json.dumps([{"object": "bucket", "start_time": 1790812800, "end_time": 1790899200, "result": [
        {"object": "organization.usage.completions.result", "input_tokens": 1000, "input_cached_tokens": 400,
         "output_tokens": 500, "num_model_requests": 5, "project_id": "proj_a", "model": "gpt-4o"},
        {"object": "organization.usage.embeddings.result", "input_tokens": 16, "num_model_requests": 2,
         "project_id": "proj_a", "model": "text-embedding-3-small"},
        {"object": "organization.usage.moderations.result", "input_tokens": 9, "num_model_requests": 1,
         "project_id": "proj_b", "model": "omni-moderation-latest"},
        {"object": "organization.usage.audio_speeches.result", "characters": 45, "num_model_requests": 1},
    ]}]))
    r = import_files("openai", [f])
    assert r.frames["requests"].select("request_id", "owner", "input_tokens", "cached_input_tokens", "output_tokens",
                                       "requests").rows() == [
        ("openai:1790812800:proj_a:gpt-4o:-:-:-", "proj_a", 600, 400, 500, 5),
        ("openai-embeddings:1790812800:proj_a:text-embedding-3-small:-:-:-", "proj_a", 16, 0, 0, 2),
        ("openai-moderations:1790812800:proj_b:omni-moderation-latest:-:-:-", "proj_b", 9, 0, 0, 1),
    ]
    assert r.ignored == [("usage that is not tokens (its money is in the costs export)", ["audio_speeches"])]


def test_otel_failed_call_without_usage_is_an_error_row(tmp_path):
    """An ERROR span (error.type rate_limit) of a chat call has no usage attributes: a request with
    status error and 0 tokens, as the contract counts failed requests; an ok span without usage
    stays unmapped."""
    def span(sid, status, attrs):
        return {"traceId": "ab" * 16, "spanId": sid, "startTimeUnixNano": "1790812800000000000",
                "endTimeUnixNano": "1790812800250000000", "status": status,
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    f = tmp_path / "spans.json"
    f.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "chat-app"}}]}, "scopeSpans": [{"spans": [
            span("0000000000000001", {"code": 2}, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                                                   "error.type": "rate_limit"}),
            span("0000000000000002", {}, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}),
        ]}]}]}))
    r = import_files("otel", [f])
    assert r.frames["requests"].select("model", "input_tokens", "cached_input_tokens", "output_tokens", "status",
                                       "latency_ms").rows() == [("gpt-4o", 0, 0, 0, "error", 250.0)]
    assert [why for *_, why in unmapped(r)] == [f"span {'ab' * 16}:0000000000000002: no gen_ai.usage.input_tokens"]


def _prom_doc(series: list[tuple[dict, list[tuple[int, str]]]]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": m, "values": [[t0, v] for t0, v in vals]} for m, vals in series]}})


def test_vllm_first_bucket_starts_where_a_counter_moves(tmp_path):
    """Counters flat from 00:00 to 00:03, then +100 prompt, +40 output, +1 request by 00:04: one
    bucket [00:03, 00:04), not [00:00, 00:04). Owner: the namespace (source kubernetes)."""
    labels = {"model_name": "m", "namespace": "serving", "pod": "vllm-0", "instance": "10.0.0.1:8000"}
    t0 = 1790812800
    series = [({"__name__": n, **labels}, [(t0 + 60 * i, v) for i, v in enumerate(vals)]) for n, vals in (
        ("vllm:prompt_tokens_total", ["500", "500", "500", "500", "600"]),
        ("vllm:generation_tokens_total", ["70", "70", "70", "70", "110"]),
        ("vllm:request_success_total", ["3", "3", "3", "3", "4"]))]
    f = tmp_path / "vllm.json"
    f.write_text(_prom_doc(series))
    r = import_files("vllm", [f])
    assert r.frames["requests"].select("request_id", "ts", "end", "owner", "source", "input_tokens", "output_tokens",
                                       "requests").rows() == [
        (f"vllm:serving/vllm-0:m:{t0 + 180}", t("2026-10-01T00:03:00Z"), t("2026-10-01T00:04:00Z"), "serving",
         "kubernetes", 100, 40, 1)]


def test_vllm_single_scrape_counts_from_the_process_start(tmp_path):
    """One /metrics scrape at 01:00 with process_start_time_seconds 00:00: one bucket
    [00:00, 01:00) holding the totals (1397 prompt, 4829 output, 15 + 21 requests); --owner names
    the owner."""
    f = tmp_path / "metrics.txt"
    f.write_text("process_start_time_seconds 1.7908128e+09\n"
                 'vllm:prompt_tokens_total{engine="0",model_name="m"} 1397.0\n'
                 'vllm:generation_tokens_total{engine="0",model_name="m"} 4829.0\n'
                 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 15.0\n'
                 'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 21.0\n')
    r = import_files("vllm", [f], options=ImportOptions(at=t("2026-10-01T01:00:00Z"), owner="team-llm"))
    assert r.frames["requests"].select("ts", "end", "owner", "input_tokens", "output_tokens", "requests").rows() == [
        (t("2026-10-01T00:00:00Z"), t("2026-10-01T01:00:00Z"), "team-llm", 1397, 4829, 36)]


def test_prometheus_workload_labels_per_series(tmp_path):
    """In one file: card A's series has exported_pod train-0 (and plain pod = the exporter): owner
    team-a; card B's series has plain pod serve-1 in team-b with job dcgm-exporter (honor_labels):
    owner team-b; card C's plain pod dcgm-exporter-x7k2p starts with its job's name: the exporter,
    no owner. Each a run of two samples a minute apart: [00:00, 00:02)."""
    t0 = 1790812800
    common = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "job": "dcgm-exporter", "Hostname": "n1"}
    series = [
        ({**common, "UUID": "GPU-A", "gpu": "0", "pod": "dcgm-exporter-x7k2p", "namespace": "monitoring",
          "exported_pod": "train-0", "exported_namespace": "team-a"}, [(t0, "50"), (t0 + 60, "60")]),
        ({**common, "UUID": "GPU-B", "gpu": "1", "pod": "serve-1", "namespace": "team-b", "container": "main"},
         [(t0, "10"), (t0 + 60, "20")]),
        ({**common, "UUID": "GPU-C", "gpu": "2", "pod": "dcgm-exporter-x7k2p", "namespace": "monitoring"},
         [(t0, "0"), (t0 + 60, "0")]),
    ]
    f = tmp_path / "dcgm.json"
    f.write_text(_prom_doc(series))
    r = import_files("prometheus", [f])
    assert r.frames["allocations"].select("gpu_id", "owner", "job_id", "start", "end").rows() == [
        ("GPU-A", "team-a", "train-0", t("2026-10-01T00:00:00Z"), t("2026-10-01T00:02:00Z")),
        ("GPU-B", "team-b", "serve-1", t("2026-10-01T00:00:00Z"), t("2026-10-01T00:02:00Z")),
    ]
    assert any(w == "capacity without an owner" and d.startswith("1 of 3 cards") for w, d in r.notes)


def test_kube_state_metrics_and_dcgm_from_one_openmetrics_file():
    """gpu_cluster_range.om (11 samples a minute apart from 00:00): the vLLM pod is on
    GPU-c4529c8d by DCGM's pod labels for 00:00-00:04 and asks 1 GPU in KSM: one allocation
    [00:00, 00:05), requested 1. train-job-0 asks 2 GPUs on gpu-node-2 (no DCGM there, capacity 8)
    and is Running 00:02-00:06: 8 allocations of share 2/8 = 0.25 over [00:02, 00:07), owner
    `vision` from its team label: 8 x 0.25 x 5/60 h = 0.166667 GPU-hours = 2 GPUs x 5 min.
    Pools from the node label `pool`: serving (2 DCGM cards), training (8 KSM cards)."""
    r = import_files("prometheus", [FIX / "gpu_cluster_range.om"],
                     options=ImportOptions(pool_label="pool", owner_label="team"))
    a = r.frames["allocations"]
    dcgm = a.filter(pl.col("source") == "kubernetes").filter(pl.col("gpu_id").str.starts_with("GPU-"))
    assert dcgm.select("gpu_id", "start", "end", "owner", "share", "requested_gpus").rows() == [
        ("GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", t("2026-10-01T00:00:00Z"), t("2026-10-01T00:05:00Z"),
         "dynamo-workload", 1.0, 1.0)]
    ksm = a.filter(pl.col("gpu_id").str.starts_with("gpu-node-2"))
    assert ksm["gpu_id"].to_list() == [f"gpu-node-2:gpu{i}" for i in range(8)]
    assert set(ksm.select("start", "end", "owner", "share", "requested_gpus").rows()) == {
        (t("2026-10-01T00:02:00Z"), t("2026-10-01T00:07:00Z"), "vision", 0.25, 2.0)}
    hours = sum((e - s).total_seconds() / 3600 * sh for s, e, sh in ksm.select("start", "end", "share").iter_rows())
    assert hours == pytest.approx(2 * 5 / 60)
    inv = r.frames["inventory"].group_by("pool").agg(pl.len()).sort("pool").rows()
    assert inv == [("serving", 2), ("training", 8)]


def test_import_help_lists_installed_formats():
    res = CliRunner().invoke(import_cmd, ["--help"])
    assert res.exit_code == 0
    assert "Installed formats (entry points ailedger.importers)" in res.output
    for name in ("slurm", "prometheus", "vllm", "litellm", "openai", "otel"):
        assert f"  {name} " in res.output


def test_a_site_format_registers_through_the_entry_point_group(tmp_path):
    """A package declaring `[ailedger.importers] csvusage = csvusage:IMPORTER` is found like the
    built-ins: `ailedger import --help` lists it and `ailedger import csvusage` runs it (in a
    fresh interpreter, since the registry is read once at import)."""
    import subprocess
    import sys

    site = tmp_path / "site"
    (site / "csvusage-1.0.dist-info").mkdir(parents=True)
    (site / "csvusage-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: csvusage\nVersion: 1.0\n")
    (site / "csvusage-1.0.dist-info" / "entry_points.txt").write_text(
        "[ailedger.importers]\ncsvusage = csvusage:IMPORTER\nbroken = csvusage_missing:IMPORTER\n")
    (site / "csvusage.py").write_text(
        "from cost_engine.importers import Parsed\n"
        "class CsvUsage:\n"
        "    name = 'csvusage'\n"
        "    summary = 'site format: owner,gpu,start,end lines -> allocations'\n"
        "    def read(self, paths, options, config):\n"
        "        parsed = Parsed()\n"
        "        for path in paths:\n"
        "            for n, line in enumerate(path.read_text().splitlines(), start=1):\n"
        "                owner, gpu, start, end = line.split(',')\n"
        "                parsed.add('allocations', path, n, allocation_id=f'site:{n}', gpu_id=gpu, start=start,\n"
        "                           end=end, owner=owner)\n"
        "        return parsed\n"
        "IMPORTER = CsvUsage()\n")
    data = tmp_path / "usage.csv"
    data.write_text("team-a,GPU-1,2026-10-01T00:00:00Z,2026-10-01T03:00:00Z\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(site)}
    code = ("import sys; from cost_engine.import_cli import import_cmd; "
            "import_cmd.main(sys.argv[1:], prog_name='ailedger import')")
    helped = subprocess.run([sys.executable, "-c", code, "--help"], env=env, capture_output=True, text=True)
    flat = " ".join(helped.stdout.split())  # the help wraps to the terminal width
    assert "csvusage site format: owner,gpu,start,end lines -> allocations" in flat
    assert "broken (cannot be loaded: csvusage_missing:IMPORTER: ModuleNotFoundError" in flat
    ran = subprocess.run([sys.executable, "-c", code, "csvusage", str(data), "--into", str(tmp_path / "b")],
                         env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "  allocations           1 rows" in ran.stdout


def test_cli_url_needs_a_prometheus_format_and_a_period(tmp_path):
    res = CliRunner().invoke(import_cmd, ["slurm", "--url", "http://127.0.0.1:9", "--start", "0", "--end", "60",
                                          "--into", str(tmp_path)])
    assert res.exit_code == 2
    assert "--url works for formats read from Prometheus (prometheus, vllm), not slurm" in res.output
    res = CliRunner().invoke(import_cmd, ["prometheus", "--url", "http://127.0.0.1:9", "--into", str(tmp_path)])
    assert res.exit_code == 2 and "--url needs --start and --end" in res.output
    res = CliRunner().invoke(import_cmd, ["prometheus", "--into", str(tmp_path)])
    assert res.exit_code == 2 and "give FILE... or --url" in res.output


def test_cli_empty_input_is_not_an_error(tmp_path):
    """A 0-byte export imports nothing and says so, exit 0: only a non-empty input with no rows
    is an error."""
    f = tmp_path / "empty.txt"
    f.write_text("")
    res = CliRunner().invoke(import_cmd, ["slurm", str(f), "--into", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "(no rows)" in res.output
