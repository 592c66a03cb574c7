"""Importers on outputs copied from public sources (tests/fixtures/real/README.md names each
source): one test per file, with the rows and figures expected from reading the file by hand."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_engine.config import parse_config
from cost_engine.import_cli import import_cmd
from cost_engine.importers import ImportFailed, ImportOptions, import_files

REAL = Path(__file__).parent / "fixtures" / "real"
UTC = timezone.utc
UTC_CONFIG = parse_config({"period": {"source_timezone": "UTC"}})
AT = datetime(2026, 10, 1, tzinfo=UTC)
XDMOD = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,elapsed,exitcode,"
         "state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname").split(",")
CEEMS = ("jobidraw,partition,qos,account,group,gid,user,uid,submit,start,end,elapsed,elapsedraw,exitcode,state,"
         "alloctres,nodelist,jobname,workdir").split(",")


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def run(fmt: str, name: str, config=None, **options):
    return import_files(fmt, [REAL / name], config, options=ImportOptions(**options))


def unmapped(result) -> list[tuple]:
    return [(r["file"], r["row"], r["reason"]) for r in result.unmapped.iter_rows(named=True)]


def cli(tmp_path, *args: str):
    return CliRunner().invoke(import_cmd, [*args, "--into", str(tmp_path / "bundle")])


def gpu_hours(frame) -> float:
    return sum(((e - s).total_seconds() / 3600) * share
               for s, e, share in frame.select("start", "end", "share").iter_rows())


# ------------------------------------------------------------------------------------------- DCGM


def test_dcgm_two_nodes_query_gives_the_vllm_card_to_its_pod_and_no_card_to_the_exporter():
    """16 series at 2026-03-10T03:41:29.184Z, all util "0": 16 telemetry rows of 0 %. 15 carry
    pod nvidia-dcgm-exporter-wqqqn/-g2fjs with container nvidia-dcgm-exporter (the exporter's own
    pod): no owner. Card GPU-c4529c8d (gpu 0 of gpu-node-1) carries pod
    vllm-agg-0-vllmdecodeworker-s65j5 in dynamo-workload: one allocation of one step (60 s),
    [03:41:29.184, 03:42:29.184), owner dynamo-workload. Nothing goes to gpu-operator."""
    r = run("prometheus", "dcgm_aicr_2x8h100_util_query.json", step_s=60)
    tel = r.frames["telemetry"]
    assert tel.height == 16 and set(tel["util_pct"].to_list()) == {0.0}
    assert set(tel["ts"].to_list()) == {t("2026-03-10T03:41:29.184Z")}
    a = r.frames["allocations"].select("gpu_id", "start", "end", "owner", "source", "job_id").to_dicts()
    assert a == [{"gpu_id": "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", "start": t("2026-03-10T03:41:29.184Z"),
                  "end": t("2026-03-10T03:42:29.184Z"), "owner": "dynamo-workload", "source": "kubernetes",
                  "job_id": "vllm-agg-0-vllmdecodeworker-s65j5"}]
    assert ("capacity without an owner", "15 of 16 cards carry no workload pod label (no exported_pod / pod of a "
            "workload): no allocation, their time is unallocated capacity") in r.notes
    assert r.unmapped.height == 0


def test_dcgm_exporter_service_scrape_of_one_node_9v4gs():
    """The issue's 8 x H100 node: 7 series name pod nvidia-dcgm-exporter-9v4gs (the exporter), one
    (gpu 2, GPU-8d76cfcf) vllm-agg-0-vllmdecodeworker-dkb9q. 8 telemetry rows; 1 allocation of
    that card for [18:30:05.739, 18:31:05.739) owner dynamo-workload; 7 of 8 cards unowned."""
    r = run("prometheus", "dcgm_aicr_9v4gs_util_query.json", step_s=60)
    assert r.frames["telemetry"].height == 8
    a = r.frames["allocations"].select("gpu_id", "start", "end", "owner", "job_id").rows()
    assert a == [("GPU-8d76cfcf-a144-5e43-876b-a4b71f2aecd1", t("2026-03-02T18:30:05.739Z"),
                  t("2026-03-02T18:31:05.739Z"), "dynamo-workload", "vllm-agg-0-vllmdecodeworker-dkb9q")]
    assert "gpu-operator" not in r.frames["allocations"]["owner"].to_list()
    assert any(w == "capacity without an owner" and d.startswith("7 of 8 cards") for w, d in r.notes)


def test_dcgm_node_without_workloads_is_capacity_without_an_owner():
    """Every one of the 8 series names the exporter's pod (nvidia-dcgm-exporter-br2tz): 8 telemetry
    rows at 2026-02-24T20:22:46.215Z and no allocation at all (before: 8 gpu-operator ones)."""
    r = run("prometheus", "dcgm_aicr_br2tz_util_query.json", step_s=60)
    assert r.frames["telemetry"].height == 8
    assert set(r.frames["telemetry"]["ts"].to_list()) == {t("2026-02-24T20:22:46.215Z")}
    assert "allocations" not in r.frames
    assert any(w == "capacity without an owner" and d.startswith("8 of 8 cards") for w, d in r.notes)


def test_dcgm_raw_metrics_scrape(tmp_path):
    """A /metrics scrape has no timestamps: refused without --at (exit 2, naming the line). With
    --at 2026-10-01T00:00:00Z: 8 telemetry rows, util 0, power as printed (gpu0 113.611 W ...
    gpu7 66.997 W); gpu 0 carries pod vllm-agg-0-vllmdecodeworker-s65j5 (container main) without
    exported_* labels (a direct scrape): 1 allocation [00:00, 00:01) with --step 60.
    DCGM_FI_DEV_GPU_TEMP and DCGM_FI_DEV_MEM_COPY_UTIL are listed once as ignored."""
    with pytest.raises(ImportFailed, match="line 1: a sample without a timestamp .* give the scrape time with --at"):
        run("prometheus", "dcgm_aicr_2x8h100_metrics.txt")
    r = run("prometheus", "dcgm_aicr_2x8h100_metrics.txt", at=AT, step_s=60)
    tel = r.frames["telemetry"].sort("power_w")
    assert tel["power_w"].to_list() == [65.709, 65.742, 66.997, 67.316, 67.328, 68.347, 68.717, 113.611]
    assert set(tel["util_pct"].to_list()) == {0.0} and set(tel["ts"].to_list()) == {AT}
    a = r.frames["allocations"].select("gpu_id", "start", "end", "owner").rows()
    assert a == [("GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", AT, t("2026-10-01T00:01:00Z"), "dynamo-workload")]
    assert r.ignored == [("DCGM fields not used for cost", ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEM_COPY_UTIL"])]
    res = cli(tmp_path, "prometheus", str(REAL / "dcgm_aicr_2x8h100_metrics.txt"))
    assert res.exit_code == 2 and "give the scrape time with --at" in res.output


# ------------------------------------------------------------------------------------------- kube-state-metrics


def test_ksm_pod_requesting_a_gpu_on_a_node_of_unknown_size(tmp_path):
    """pod0 (namespace default) asks 1 nvidia_com_gpu in container pod1_con1 on node1 and is in phase
    Running (its containers' running gauges are 0, the phase wins). Without node1's GPU capacity or
    DCGM cards the card cannot be named: nothing imported, exit 1 with that reason; the 14 other
    kube_pod_* families are listed once as ignored."""
    r = run("prometheus", "ksm_server_test_pod0_metrics.txt", at=AT, step_s=60)
    assert r.rows() == 0
    assert unmapped(r) == [("ksm_server_test_pod0_metrics.txt", 131, "pod default/pod0 on node node1: the node's "
                            "GPUs are unknown: export kube_node_status_capacity or DCGM metrics of its cards")]
    assert len(r.ignored[0][1]) == 14
    res = cli(tmp_path, "prometheus", str(REAL / "ksm_server_test_pod0_metrics.txt"), "--at", "2026-10-01T00:00:00Z",
              "--step", "60")
    assert res.exit_code == 1
    assert "error: nothing imported; most common reason: pod default/pod0 on node node1: the node's GPUs are " \
           "unknown" in res.output


def test_ksm_node_gpu_capacity_becomes_inventory():
    """kube_node_status_capacity{node="127.0.0.1",resource="nvidia_com_gpu"} 4 (allocatable 1 is not
    capacity): with --pool gpu, 4 cards 127.0.0.1:gpu0..3 of capacity 1, index 0..3."""
    r = run("prometheus", "ksm_node_test_gpu_capacity_metrics.txt", at=AT, pool="gpu")
    inv = r.frames["inventory"].select("gpu_id", "pool", "node", "capacity", "index").rows()
    assert inv == [(f"127.0.0.1:gpu{i}", "gpu", "127.0.0.1", 1.0, str(i)) for i in range(4)]
    assert r.unmapped.height == 0


def test_ksm_gpu_request_without_running_state():
    """pod1 in ns1 requests 1 nvidia_com_gpu (limits say the same: counted once); the file has no
    kube_pod_status_phase, so when it held the card is unknown: unmapped, nothing guessed. Init
    container requests are listed as ignored."""
    r = run("prometheus", "ksm_pod_test_gpu_requests_metrics.txt", at=AT, step_s=60)
    assert r.rows() == 0
    assert unmapped(r) == [("ksm_pod_test_gpu_requests_metrics.txt", 21, "pod ns1/pod1 requests 1 GPUs but its "
                            "running time is unknown: export kube_pod_status_phase (or "
                            "kube_pod_container_status_running)")]
    assert r.ignored == [("kube-state-metrics series not used for GPU allocation",
                          ["kube_pod_init_container_resource_limits", "kube_pod_init_container_resource_requests"])]


# ------------------------------------------------------------------------------------------- sacct


def test_sacct_xdmod_accounting_log(tmp_path):
    """Four jobs, --noheader in XDMoD's field order (first field JobID, second JobIDRaw). 4103947,
    4107166 (CANCELLED by 102216) and 4107219 have no GPUs in AllocTRES (billing/cpu/mem/node):
    skipped and counted. 5692623 has gres/gpu=2 on cpn-k16-35-01,cpn-k16-37-01 (1 per node) but
    Start = End = 2016-08-01T07:04:09: two zero-length allocations, both rejected. Nothing
    imported: exit 1 naming that reason."""
    r = run("slurm", "sacct_xdmod_accounting_logs.txt", UTC_CONFIG, columns=XDMOD)
    assert r.rows() == 0
    assert unmapped(r) == [("sacct_xdmod_accounting_logs.txt", 4,
                            "allocations: zero-length interval (start = end = 2016-08-01T07:04:09Z)")] * 2
    assert ("slurm jobs without GPUs", "3 jobs request no GPUs and were skipped") in r.notes
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "ailedger.toml").write_text('[period]\nsource_timezone = "UTC"\n')
    res = cli(tmp_path, "slurm", str(REAL / "sacct_xdmod_accounting_logs.txt"), "--columns", ",".join(XDMOD))
    assert res.exit_code == 1
    assert ("error: nothing imported; most common reason: allocations: zero-length interval (start = end = "
            "2016-08-01T07:04:09Z) (2 of 2 unmapped records)") in res.output


def test_sacct_xdmod_phillips_excerpt():
    """12 jobs; only 163485 has GPUs: AllocTRES billing=12,cpu=12,gres/gpu=2,mem=31000M,node=1 on
    cpn-f11-31, State "CANCELLED by 380693", account chaff, Start 2016-12-22T07:15:13, End
    2017-01-01T20:42:19. Two allocations (gpu0, gpu1) of 10 d 13:27:06 = 253.451667 h each:
    506.903333 GPU-hours. ReqTRES (cpu=12,node=1) asks no GPU: requested_gpus is unknown."""
    r = run("slurm", "sacct_xdmod_phillips_head.txt", UTC_CONFIG, columns=XDMOD)
    a = r.frames["allocations"]
    assert a.select("allocation_id", "gpu_id", "owner", "job_id").rows() == [
        ("slurm:163485:cpn-f11-31:0", "cpn-f11-31:gpu0", "chaff", "163485"),
        ("slurm:163485:cpn-f11-31:1", "cpn-f11-31:gpu1", "chaff", "163485"),
    ]
    assert set(a["start"].to_list()) == {t("2016-12-22T07:15:13Z")}
    assert set(a["end"].to_list()) == {t("2017-01-01T20:42:19Z")}
    assert gpu_hours(a) == pytest.approx(2 * (240 + 13 + 27 / 60 + 6 / 3600))
    assert a["requested_gpus"].to_list() == [None, None]
    assert ("slurm jobs without GPUs", "11 jobs request no GPUs and were skipped") in r.notes
    assert r.unmapped.height == 0


def test_sacct_ceems_jobidraw_first_and_offsets():
    """Header-less, first field JobIDRaw, times with +0100. Jobs on one node with gres/gpu=8:
    1479763 (acc1, 2022-02-21 14:37:07-15:26:29 +0100 = 13:37:07-14:26:29Z), 147975 (acc3) and
    1479765 (acc1) both 2023-02-21 13:37:07-14:26:29Z on compute-0: the first by job id gets
    gpu0-7, the other gpu8-15. 24 allocations of 49 min 22 s: 24 x 0.822778 h = 19.746667
    GPU-hours. Six jobs put 8 GPUs on compute-[0-2] (3 nodes): unmapped; three have gres/gpu=0."""
    r = run("slurm", "sacct_ceems_testdata.txt", columns=CEEMS)
    a = r.frames["allocations"]
    assert a.height == 24
    assert gpu_hours(a) == pytest.approx(24 * (49 * 60 + 22) / 3600)
    by_job = {j: (sorted(g["gpu_id"].to_list(), key=lambda x: int(x.split("gpu")[-1])), g["owner"][0], g["start"][0])
              for (j,), g in a.group_by("job_id")}
    assert by_job == {
        "1479763": ([f"compute-0:gpu{i}" for i in range(8)], "acc1", t("2022-02-21T13:37:07Z")),
        "147975": ([f"compute-0:gpu{i}" for i in range(8)], "acc3", t("2023-02-21T13:37:07Z")),
        "1479765": ([f"compute-0:gpu{i}" for i in range(8, 16)], "acc1", t("2023-02-21T13:37:07Z")),
    }
    assert [(row, why) for _, row, why in unmapped(r)] == [
        (n, f"job {j}: 8 GPUs do not split evenly over 3 nodes")
        for n, j in ((3, "1481510"), (5, "14508"), (6, "147973"), (8, "11508"), (9, "81510"), (10, "1009248"))
    ]
    assert ("slurm jobs without GPUs", "3 jobs request no GPUs and were skipped") in r.notes


# ------------------------------------------------------------------------------------------- OpenAI


def test_openai_reference_completions_page_is_not_grouped(tmp_path):
    """The API reference's page: one bucket 1730419200-1730505600 with one result of 1000 input
    (400 cached), 500 output, 5 requests, project_id and model null: without group_by there is no
    owner and no model, so nothing can be imported; --owner names an owner but the model stays
    unknown. Exit 1 naming the group_by the query needs."""
    r = run("openai", "openai_openapi_usage_completions.json")
    assert r.rows() == 0
    assert unmapped(r) == [("openai_openapi_usage_completions.json", 1,
                            "usage without project_id and model: query with group_by=project_id,model")]
    r = run("openai", "openai_openapi_usage_completions.json", owner="org-platform")
    assert [why for *_, why in unmapped(r)] == ["usage without model: query with group_by=project_id,model"]
    res = cli(tmp_path, "openai", str(REAL / "openai_openapi_usage_completions.json"))
    assert res.exit_code == 1
    assert "most common reason: usage without project_id and model: query with group_by=project_id,model" in res.output


def test_openai_reference_embeddings_page():
    """Embeddings result: 16 input tokens, 2 requests, no project or model: unmapped the same way
    (embeddings are token usage, with no output tokens)."""
    r = run("openai", "openai_openapi_usage_embeddings.json")
    assert unmapped(r) == [("openai_openapi_usage_embeddings.json", 1,
                            "usage without project_id and model: query with group_by=project_id,model")]


def test_openai_reference_images_page_is_ignored_on_purpose(tmp_path):
    """Images usage counts images, not tokens: listed once as ignored, not unmapped; nothing
    imported, so the command exits 1 and says why."""
    r = run("openai", "openai_openapi_usage_images.json")
    assert r.unmapped.height == 0 and r.rows() == 0
    assert r.ignored == [("usage that is not tokens (its money is in the costs export)", ["images"])]
    res = cli(tmp_path, "openai", str(REAL / "openai_openapi_usage_images.json"))
    assert res.exit_code == 1
    assert "ignored on purpose (usage that is not tokens (its money is in the costs export)): images" in res.output
    assert "most common reason: usage that is not tokens (its money is in the costs export): images" in res.output


def test_openai_reference_costs_page():
    """One cost of 0.06 usd for 2024-11-01 (1730419200-1730505600) without a project: unmapped by
    default; with --owner org-platform one api_fees row of 0.06 USD over that day."""
    r = run("openai", "openai_openapi_costs.json")
    assert [why for *_, why in unmapped(r)] == [
        "cost of 0.06 USD without project_id: query with group_by=project_id, or name the owner with --owner "
        "(an api_fees cost needs one)"]
    r = run("openai", "openai_openapi_costs.json", owner="org-platform")
    c = r.frames["costs"].select("cost_id", "category", "amount", "currency", "start", "end", "owner", "source")
    assert c.to_dicts() == [{"cost_id": "openai:1730419200:org-platform:-", "category": "api_fees", "amount": 0.06,
                             "currency": "USD", "start": t("2024-11-01T00:00:00Z"), "end": t("2024-11-02T00:00:00Z"),
                             "owner": "org-platform", "source": "openai"}]


# ------------------------------------------------------------------------------------------- vLLM


def test_vllm_docs_scrape_needs_an_owner_and_a_start():
    """vLLM's documented /metrics: generation 27,453 tokens and 132 finished requests (1 stop + 131
    length + 0 abort) for meta-llama/Llama-3.1-8B-Instruct, no namespace label, no prompt counter,
    no process_start_time_seconds. Without an owner: unmapped asking for --owner; with one, a
    single scrape counts since an unknown start: unmapped, not stretched to any period. The
    gauge and the TTFT histogram are listed once as ignored."""
    r = run("vllm", "vllm_docs_design_metrics.txt", at=AT)
    assert [why for *_, why in unmapped(r)] == [
        "meta-llama/Llama-3.1-8B-Instruct on vllm: no namespace label to name the owner (an instance address "
        "changes on restart): give --owner or --owner-label"]
    assert r.ignored == [("not token usage (gauges, histograms, the server's own metrics)",
                          ["vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
                           "vllm:time_to_first_token_seconds_count"])]
    r = run("vllm", "vllm_docs_design_metrics.txt", at=AT, owner="team-llm")
    assert [why for *_, why in unmapped(r)] == [
        "meta-llama/Llama-3.1-8B-Instruct on vllm: one scrape of counters that count since the server started, and "
        "the start is unknown (no process_start_time_seconds): scrape twice or query a range"]


def test_vllm_docs_histogram_scrape_is_ignored_on_purpose(tmp_path):
    """Only vllm:iteration_tokens_total histogram series: not usage, ignored (listed once), nothing
    imported: exit 1 naming them."""
    r = run("vllm", "vllm_docs_usage_metrics.txt", at=AT)
    assert r.rows() == 0 and r.unmapped.height == 0
    assert r.ignored[0][1] == ["vllm:iteration_tokens_total_bucket", "vllm:iteration_tokens_total_sum"]
    res = cli(tmp_path, "vllm", str(REAL / "vllm_docs_usage_metrics.txt"), "--at", "2026-10-01T00:00:00Z")
    assert res.exit_code == 1 and "vllm:iteration_tokens_total_bucket" in res.output


def test_vllm_docs_http_metrics_are_the_servers_own():
    """Five http_* series of the API server (201 completions requests): the server's own metrics,
    ignored on purpose, not token usage."""
    r = run("vllm", "vllm_docs_design_http_metrics.txt", at=AT)
    assert r.rows() == 0 and r.unmapped.height == 0
    assert r.ignored[0][1] == ["http_request_duration_highr_seconds_count", "http_request_duration_seconds_count",
                               "http_request_size_bytes_count", "http_requests_total", "http_response_size_bytes_count"]


# ------------------------------------------------------------------------------------------- LiteLLM


def test_litellm_docs_spend_logs_row_has_no_request_id():
    """The documented LiteLLM_SpendLogs row (20 prompt, 80 completion tokens, team e8d1460f...)
    shows no request_id or startTime: not a spend-log record this importer can key; unmapped."""
    r = run("litellm", "litellm_docs_spend_logs_row.json")
    assert unmapped(r) == [("litellm_docs_spend_logs_row.json", 1,
                            "neither a spend log row (request_id) nor a daily spend row (date)")]


def test_litellm_row_owned_only_by_end_user(tmp_path):
    """api_key "", team_id "", end_user test_user_1: by default unmapped, the reason suggesting
    --owner-by end_user (exit 1). With it: one request, owner test_user_1, model
    claude-3-7-sonnet-20250219 (model_group empty), 2095 input (0 cached), 503 output, ok;
    ttft = latency = 22:02:42.989132 - 22:02:42.975883 = 13.249 ms."""
    r = run("litellm", "litellm_test_spend_log_api_base.json")
    assert [why for *_, why in unmapped(r)] == [
        "request chatcmpl-34df56d5-4807-45c1-bb99-61e52586b802: no team_id or api_key to name the owner; it has "
        "end_user 'test_user_1': import with --owner-by end_user"]
    res = cli(tmp_path, "litellm", str(REAL / "litellm_test_spend_log_api_base.json"))
    assert res.exit_code == 1 and "import with --owner-by end_user" in res.output
    r = run("litellm", "litellm_test_spend_log_api_base.json", owner_by="end_user")
    row = r.frames["requests"].select("owner", "model", "input_tokens", "cached_input_tokens", "output_tokens",
                                      "status", "ttft_ms", "latency_ms", "ts").row(0, named=True)
    assert row == {"owner": "test_user_1", "model": "claude-3-7-sonnet-20250219", "input_tokens": 2095,
                   "cached_input_tokens": 0, "output_tokens": 503, "status": "ok", "ttft_ms": 13.249,
                   "latency_ms": 13.249, "ts": t("2025-03-24T22:02:42.975883Z")}


def test_litellm_row_through_a_router_model_group():
    """Same call through a Router: model_group my-anthropic-model-group is the model callers use
    (and allocations name), so it wins over the provider model."""
    r = run("litellm", "litellm_test_spend_log_router.json", owner_by="end_user")
    assert r.frames["requests"].select("owner", "model", "input_tokens", "output_tokens").rows() == [
        ("test_user_1", "my-anthropic-model-group", 2095, 503)]


# ------------------------------------------------------------------------------------------- OTel


def test_otel_semconv_simple_chat():
    """52 input, 47 output tokens, response model gpt-4-0613, no resource attributes: no
    service.name, so unmapped unless --owner names the owner; then one ok row, latency 2,000 ms."""
    r = run("otel", "otel_semconv_simple_chat.json")
    assert [why for *_, why in unmapped(r)] == [
        "span 4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7: no service.name to name the owner"]
    r = run("otel", "otel_semconv_simple_chat.json", owner="chat-app")
    assert r.frames["requests"].select("model", "input_tokens", "output_tokens", "status", "latency_ms").rows() == [
        ("gpt-4-0613", 52, 47, "ok", 2000.0)]


def test_otel_semconv_tool_calls():
    """Two chat spans (47 in/17 out, then 97 in/52 out) around an execute_tool span: two rows of
    64 and 149 tokens; the tool span is skipped and counted (its model calls are spans of their
    own)."""
    r = run("otel", "otel_semconv_tool_calls.json", owner="chat-app")
    assert r.frames["requests"].select("input_tokens", "output_tokens", "latency_ms").rows() == [
        (47, 17, 1000.0), (97, 52, 3000.0)]
    assert ("otel spans", "1 agent/tool spans skipped (their model calls are spans of their own)") in r.notes


def test_otel_semconv_system_instructions():
    """28 input, 10 output tokens of gpt-4-0613: one row."""
    r = run("otel", "otel_semconv_system_instructions.json", owner="chat-app")
    assert r.frames["requests"].select("model", "input_tokens", "output_tokens").rows() == [("gpt-4-0613", 28, 10)]
