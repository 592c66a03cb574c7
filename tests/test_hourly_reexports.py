"""Hourly exports into one store (issue 38, items 1, 6, 16): an overlapping export adds nothing,
two windows that do not overlap store exactly their union, for every importer, through the
real `ailedger import ... --db` path. Plus the one local-time rule and the bounded hostlist.

Inputs are built here; every figure is worked out by hand in the docstrings. T0 is
2026-10-01T00:00:00Z (epoch 1790812800); "00:50" means T0 + 50 minutes.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import store
from cost_engine.contract import TABLES
from cost_engine.import_cli import import_cmd
from cost_engine.importers import LocalTimeError, import_files, localize, parse_time
from cost_engine.importers.slurm import expand_hostlist

T0 = 1790812800
H = "JobID|Account|User|Partition|Submit|Start|End|State|AllocTRES|NodeList"


def at(minutes: float) -> datetime:
    return datetime.fromtimestamp(T0 + minutes * 60, tz=timezone.utc)


def iso(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")


def ingest(fmt: str, db: Path, path: Path, *extra: str) -> str:
    res = CliRunner().invoke(import_cmd, [fmt, str(path), "--db", str(db), *extra])
    assert res.exit_code == 0, res.output
    return res.output


def stored(db: Path, table: str) -> list[tuple]:
    """The stored rows of a table, contract columns, sorted (the store's own order differs)."""
    frame = store.load_bundle(db, tables=[table])[table]
    return sorted(frame.select([c.name for c in TABLES[table]]).rows(), key=repr)


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def runs(tmp: Path, fmt: str, full: str, first: str, overlap: str, disjoint: str, table: str | tuple[str, ...],
         suffix: str = ".json") -> dict:
    """Stored `table` after: the full span in one export; the first window then an overlapping
    second one; the first window then the next, disjoint one. Several tables: {table: that}."""
    tables = (table,) if isinstance(table, str) else table
    out: dict = {t: {} for t in tables}
    for case, files in {"full": [full], "overlap": [first, overlap], "disjoint": [first, disjoint]}.items():
        db = tmp / f"{case}.duckdb"
        for i, text in enumerate(files):
            ingest(fmt, db, write(tmp, f"{case}{i}{suffix}", text))
        for t in tables:
            out[t][case] = stored(db, t)
    return out[table] if isinstance(table, str) else out


def gpu_hours(rows: list[tuple], owner: str) -> float:
    """GPU-hours of allocation rows (allocation_id, gpu_id, start, end, owner, source, share, ...)."""
    return sum((r[3] - r[2]).total_seconds() / 3600 * r[6] for r in rows if r[4] == owner)


def engine_hours(db: Path) -> dict[str, float]:
    """Allocated GPU-hours per tenant as the engine reports them from the store."""
    from cost_engine import api
    from cost_engine.report import owner_table

    return dict(owner_table(api.run(str(db)), ["tenant"]).select("tenant", "allocated_gpu_hours").rows())


# ------------------------------------------------------------------------------------------- slurm


def test_slurm_reexport_of_one_job_adds_nothing(tmp_path):
    """The issue's case on node n1: 3001 (4 GPUs, 00:00-06:00) and 3002 (2 GPUs, 05:00-06:30),
    then a file with 3002 alone. 3002 keeps its cards gpu4-5 (gpu0-3 are 3001's at 05:00) and
    its ids `slurm:3002:n1:0..1`: 0 inserted, 2 unchanged. acct1 4 x 6 h = 24 GPU-h, acct2
    2 x 1.5 h = 3 GPU-h; no card holds two jobs at once."""
    a = f"{H}\n3001|acct1|u|p|{iso(0)}|{iso(0)}|{iso(360)}|COMPLETED|gres/gpu=4|n1\n" \
        f"3002|acct2|u|p|{iso(300)}|{iso(300)}|{iso(390)}|COMPLETED|gres/gpu=2|n1\n"
    b = f"{H}\n3002|acct2|u|p|{iso(300)}|{iso(300)}|{iso(390)}|COMPLETED|gres/gpu=2|n1\n"
    db = tmp_path / "s.duckdb"
    ingest("slurm", db, write(tmp_path, "a.txt", a))
    assert "ingest 2: 0 inserted, 2 unchanged, 0 replaced" in ingest("slurm", db, write(tmp_path, "b.txt", b))
    rows = stored(db, "allocations")
    assert [(r[0], r[1]) for r in rows if r[8] == "3002"] == [("slurm:3002:n1:0", "n1:gpu4"),
                                                             ("slurm:3002:n1:1", "n1:gpu5")]
    assert gpu_hours(rows, "acct1") == 24.0 and gpu_hours(rows, "acct2") == 3.0
    assert engine_hours(db) == {"acct1": 24.0, "acct2": 3.0}


def test_slurm_separate_exports_place_around_stored_jobs(tmp_path):
    """Non-overlapping exports: 3001 alone, then 3002 alone (and, in a second store, the other
    way round). The second job's cards avoid the stored job's while both run (05:00-06:00), so
    no card is double-booked and the engine splits nothing: 24 and 3 GPU-h, not 23 and 2."""
    j1 = f"{H}\n3001|acct1|u|p|{iso(0)}|{iso(0)}|{iso(360)}|COMPLETED|gres/gpu=4|n1\n"
    j2 = f"{H}\n3002|acct2|u|p|{iso(300)}|{iso(300)}|{iso(390)}|COMPLETED|gres/gpu=2|n1\n"
    for order, files in {"forward": (j1, j2), "backward": (j2, j1)}.items():
        db = tmp_path / f"{order}.duckdb"
        for i, text in enumerate(files):
            ingest("slurm", db, write(tmp_path, f"{order}{i}.txt", text))
        rows = stored(db, "allocations")
        cards = {job: {r[1] for r in rows if r[8] == job} for job in ("3001", "3002")}
        assert not cards["3001"] & cards["3002"], order
        assert engine_hours(db) == {"acct1": 24.0, "acct2": 3.0}, order


def test_slurm_hourly_exports_of_a_running_job_store_what_one_export_would(tmp_path):
    """Job A (acct1, 4 GPUs on n1) runs 00:00-02:30; B (acct2, 2 GPUs) 00:30-00:50; C (acct3,
    2 GPUs) 01:10-01:40. Hourly exports with --end-at the export time: 01:00 (A running, B),
    02:00 (A running, C; the overlapping variant repeats B), 03:00 (A completed). One export
    at 03:00 places A on gpu0-3, B on gpu4-5, C on gpu4-5 (free again at 01:10). The hourly
    ones must store exactly that: A's four rows continued to 02:30, never a second set.
    A: 4 x 2.5 h = 10 GPU-h; B: 2 x 20 min = 0.666667; C: 2 x 30 min = 1."""
    a_run = "A|acct1|u|p|{s}|{s}|Unknown|RUNNING|gres/gpu=4|n1\n".format(s=iso(0))
    a_done = f"A|acct1|u|p|{iso(0)}|{iso(0)}|{iso(150)}|COMPLETED|gres/gpu=4|n1\n"
    b = f"B|acct2|u|p|{iso(30)}|{iso(30)}|{iso(50)}|COMPLETED|gres/gpu=2|n1\n"
    c = f"C|acct3|u|p|{iso(70)}|{iso(70)}|{iso(100)}|COMPLETED|gres/gpu=2|n1\n"
    full = tmp_path / "full.duckdb"
    ingest("slurm", full, write(tmp_path, "all.txt", H + "\n" + a_done + b + c))
    want = stored(full, "allocations")
    for case, second in {"disjoint": a_run + c, "overlap": a_run + b + c}.items():
        db = tmp_path / f"{case}.duckdb"
        ingest("slurm", db, write(tmp_path, f"{case}1.txt", H + "\n" + a_run + b), "--end-at", iso(60))
        out = ingest("slurm", db, write(tmp_path, f"{case}2.txt", H + "\n" + second), "--end-at", iso(120))
        assert "4 replaced, 4 continued" in out, out  # A's rows, extended to 02:00
        out = ingest("slurm", db, write(tmp_path, f"{case}3.txt", H + "\n" + a_done))
        assert "ingest 3: 0 inserted, 0 unchanged, 4 replaced, 4 continued" in out, out
        assert stored(db, "allocations") == want, case
    assert [(r[0], r[1]) for r in want if r[8] == "C"] == [("slurm:C:n1:0", "n1:gpu4"), ("slurm:C:n1:1", "n1:gpu5")]
    assert gpu_hours(want, "acct1") == 10.0
    assert gpu_hours(want, "acct2") == pytest.approx(2 * 20 / 60)
    assert gpu_hours(want, "acct3") == 1.0


def test_slurm_pending_job_then_started_updates_its_queue_row(tmp_path):
    """Export at 01:00: job Q (2 GPUs) pending since 00:10 for Resources: a queue row without
    start. Export at 02:00: Q ran 01:20-01:50 after that wait: its queue row gets start 01:20
    (one row, replaced, not a conflict) and 2 allocations of 30 min = 1 GPU-h."""
    head = H + "|Reason\n"
    pend = f"Q|acct|u|p|{iso(10)}|Unknown|Unknown|PENDING|gres/gpu=2|None assigned|Resources\n"
    ran = f"Q|acct|u|p|{iso(10)}|{iso(80)}|{iso(110)}|COMPLETED|gres/gpu=2|n1|Resources\n"
    db = tmp_path / "q.duckdb"
    ingest("slurm", db, write(tmp_path, "1.txt", head + pend))
    out = ingest("slurm", db, write(tmp_path, "2.txt", head + ran))
    assert "2 inserted, 0 unchanged, 1 replaced, 1 continued" in out, out
    assert [(r[0], r[4], r[5]) for r in stored(db, "queue")] == [("Q", at(10), at(80))]
    assert gpu_hours(stored(db, "allocations"), "acct") == 1.0


def test_slurm_running_job_continues_in_a_bundle_folder(tmp_path):
    """The same continuation with --into: A running to 01:00 (4 rows of 1 h), then completed at
    02:30: the folder keeps 4 rows of 2.5 h = 10 GPU-h, reported as 4 continued."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "ailedger.toml").write_text('[period]\nsource_timezone = "UTC"\n')
    run = write(tmp_path, "1.txt", f"{H}\nA|acct1|u|p|{iso(0)}|{iso(0)}|Unknown|RUNNING|gres/gpu=4|n1\n")
    done = write(tmp_path, "2.txt", f"{H}\nA|acct1|u|p|{iso(0)}|{iso(0)}|{iso(150)}|COMPLETED|gres/gpu=4|n1\n")
    for f, extra in ((run, ["--end-at", iso(60)]), (done, [])):
        res = CliRunner().invoke(import_cmd, ["slurm", str(f), "--into", str(tmp_path / "b"), *extra])
        assert res.exit_code == 0, res.output
    assert "wrote allocations.csv: 0 added, 0 unchanged, 4 replaced, 4 continued" in res.output
    a = pl.read_csv(tmp_path / "b" / "allocations.csv")
    assert a.height == 4 and set(a["end"].to_list()) == {"2026-10-01T02:30:00Z"}


# ------------------------------------------------------------------------------------------- prometheus


def _prom(series: list[tuple[dict, list[tuple[float, str]]]]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": m, "values": [[T0 + 60 * t, v] for t, v in vals]} for m, vals in series]}})


def _dcgm(lo: int, hi: int) -> str:
    """GPU-A busy with team-a/train-0 at samples every 10 min from `lo` to `hi` minutes; its clock
    event reasons carry HW slowdown (0x8) at 00:50-01:20."""
    card = {"UUID": "GPU-A", "gpu": "0", "Hostname": "n1", "pod": "train-0", "namespace": "team-a"}
    mins = range(lo, hi + 1, 10)
    return _prom([({"__name__": "DCGM_FI_DEV_GPU_UTIL", **card}, [(m, "80") for m in mins]),
                  ({"__name__": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", **card},
                   [(m, "8" if 50 <= m <= 80 else "0") for m in mins])])


def test_prometheus_dcgm_hourly_windows(tmp_path):
    """One export 00:00-02:00 (13 samples, step 10 min): the pod's allocation [00:00, 02:10) =
    2.166667 GPU-h, 13 telemetry rows, one slowdown event [00:50, 01:30). Windows 00:00-01:00
    then 00:30-02:00 (overlap) or 01:10-02:00 (the next samples): runs [00:00, 01:10) and
    [00:30, 02:10) / [01:10, 02:10), events [00:50, 01:10) and [00:50, 01:30) / [01:10, 01:30)
    join into exactly what the one export stores; so do the two windows imported the other way
    round (the later one first: the run then takes the earlier one's id)."""
    tables = ("allocations", "telemetry", "events")
    every = runs(tmp_path, "prometheus", _dcgm(0, 120), _dcgm(0, 60), _dcgm(30, 120), _dcgm(70, 120), tables)
    late = tmp_path / "late.duckdb"  # the later window first, the earlier one after it
    for i, text in enumerate((_dcgm(30, 120), _dcgm(0, 60))):
        ingest("prometheus", late, write(tmp_path, f"late{i}.json", text))
    for table, got in every.items():
        assert got["overlap"] == got["full"] and got["disjoint"] == got["full"], table
        assert stored(late, table) == got["full"], table
        if table == "allocations":
            assert [(r[0], r[2], r[3]) for r in got["full"]] == [
                ("k8s:team-a/train-0:GPU-A:20261001T000000Z", at(0), at(130))]
            assert gpu_hours(got["full"], "team-a") == pytest.approx(130 / 60)
        if table == "telemetry":
            assert len(got["full"]) == 13
        if table == "events":
            assert [(r[0], r[1]) for r in got["full"]] == [(at(50), at(90))]


def _ksm(lo: int, hi: int) -> str:
    """train-0 (team-a) asks 2 GPUs on n2 (capacity 4, no DCGM) and runs at samples every 10 min
    from `lo` to `hi`: 4 allocations of share 0.5 each."""
    mins = range(lo, hi + 1, 10)
    pod = {"namespace": "team-a", "pod": "train-0"}
    return _prom([
        ({"__name__": "kube_pod_container_resource_requests", **pod, "container": "c", "node": "n2",
          "resource": "nvidia_com_gpu", "unit": "integer"}, [(m, "2") for m in mins]),
        ({"__name__": "kube_pod_status_phase", **pod, "phase": "Running"}, [(m, "1") for m in mins]),
        ({"__name__": "kube_node_status_capacity", "node": "n2", "resource": "nvidia_com_gpu", "unit": "integer"},
         [(m, "4") for m in mins]),
    ])


def test_kube_state_metrics_hourly_windows(tmp_path):
    """One export 00:00-02:00: 4 cards x share 0.5 over [00:00, 02:10) = 4 x 0.5 x 2.166667 =
    4.333333 GPU-h (2 GPUs x 130 min). The hourly windows (overlapping or next) store the same."""
    got = runs(tmp_path, "prometheus", _ksm(0, 120), _ksm(0, 60), _ksm(30, 120), _ksm(70, 120), "allocations")
    assert got["overlap"] == got["full"] and got["disjoint"] == got["full"]
    assert len(got["full"]) == 4
    assert gpu_hours(got["full"], "team-a") == pytest.approx(2 * 130 / 60)


# ------------------------------------------------------------------------------------------- vllm


def _vllm(lo: int, hi: int) -> str:
    """Counters every 10 min: +100 prompt, +10 output and +1 finished request per interval,
    except 00:50-01:00, where no request finishes (its tokens join the next interval's bucket)."""
    labels = {"model_name": "m", "namespace": "serving", "pod": "vllm-0"}
    prompt, out, req, p, o, q = [], [], [], 0, 0, 0
    for m in range(0, 121, 10):
        if m > 0:
            p, o, q = p + 100, o + 10, q + (0 if m == 60 else 1)
        if lo <= m <= hi:
            prompt.append((m, str(p)))
            out.append((m, str(o)))
            req.append((m, str(q)))
    return _prom([({"__name__": "vllm:prompt_tokens_total", **labels}, prompt),
                  ({"__name__": "vllm:generation_tokens_total", **labels}, out),
                  ({"__name__": "vllm:request_success_total", **labels}, req)])


def test_vllm_hourly_windows(tmp_path):
    """One export 00:00-02:00: 11 buckets, [00:50, 01:10) holding 200 prompt / 20 output /
    1 request, the others 100 / 10 / 1: 1200 prompt, 120 output, 11 requests. Window 00:00-01:00
    stores 5 buckets to 00:50 (its last 100 / 10 wait for a request: unmapped); 00:30-02:00 then
    skips 00:30-00:50 (stored) and stores the rest exactly as the one export: the same 11.
    The next window 01:00-02:00 starts a bucket at 01:00 (100 / 10 / 1): 5 + 6 buckets,
    1100 prompt, 110 output, 11 requests: the union, the 100 / 10 of 00:50-01:00 named unmapped
    by the first import, nothing twice."""
    got = runs(tmp_path, "vllm", _vllm(0, 120), _vllm(0, 60), _vllm(30, 120), _vllm(60, 120), "requests")
    assert got["overlap"] == got["full"]
    cols = [c.name for c in TABLES["requests"]]
    full = pl.DataFrame(got["full"], schema=cols, orient="row")
    assert full.height == 11 and full["input_tokens"].sum() == 1200 and full["output_tokens"].sum() == 120
    assert full.filter(pl.col("ts") == at(50))["input_tokens"].to_list() == [200]
    apart = pl.DataFrame(got["disjoint"], schema=cols, orient="row")
    assert apart.height == 11 and apart["input_tokens"].sum() == 1100 and apart["output_tokens"].sum() == 110
    assert apart["requests"].sum() == 11


# ------------------------------------------------------------------------------------------- gateways


def _litellm(idx: range) -> str:
    """Spend log rows r0..r5 at 00:05 + 20 min x i, 100 prompt / 10 completion tokens each."""
    return json.dumps([{"request_id": f"r{i}", "team_id": "team-a", "model": "gpt-4o", "prompt_tokens": 100,
                        "completion_tokens": 10, "startTime": iso(5 + 20 * i), "endTime": iso(6 + 20 * i),
                        "status": "success"} for i in idx])


def test_litellm_hourly_windows(tmp_path):
    """Full: 6 requests, 600 prompt tokens. Windows r0-r2 then r2-r5 (r2 at 00:45 in both) or
    r3-r5: the same 6 rows; the overlap's second import inserts 3 and leaves r2 unchanged."""
    got = runs(tmp_path, "litellm", _litellm(range(6)), _litellm(range(3)), _litellm(range(2, 6)),
               _litellm(range(3, 6)), "requests")
    assert got["overlap"] == got["full"] and got["disjoint"] == got["full"]
    assert len(got["full"]) == 6 and sum(r[5] for r in got["full"]) == 600
    out = ingest("litellm", tmp_path / "overlap.duckdb", write(tmp_path, "again.json", _litellm(range(2, 6))))
    assert "0 inserted, 4 unchanged" in out


def _openai(hours: range) -> str:
    """Hourly completions buckets (1000 input incl. 200 cached, 50 output, 4 requests) and costs
    buckets (0.25 USD) of proj_a, for the given hours."""
    usage = [{"object": "bucket", "start_time": T0 + 3600 * h, "end_time": T0 + 3600 * (h + 1), "results": [
        {"object": "organization.usage.completions.result", "input_tokens": 1000, "output_tokens": 50,
         "input_cached_tokens": 200, "num_model_requests": 4, "project_id": "proj_a", "user_id": None,
         "api_key_id": None, "model": "gpt-4o-mini", "batch": False}]} for h in hours]
    costs = [{"object": "bucket", "start_time": T0 + 3600 * h, "end_time": T0 + 3600 * (h + 1), "results": [
        {"object": "organization.costs.result", "amount": {"value": 0.25, "currency": "usd"},
         "line_item": "gpt-4o-mini, input", "project_id": "proj_a"}]} for h in hours]
    return json.dumps([{"object": "page", "data": usage, "has_more": False},
                       {"object": "page", "data": costs, "has_more": False}])


def test_openai_hourly_windows(tmp_path):
    """Full: hours 0-2, 3 usage rows (3 x 800 uncached input = 2400) and 3 costs (0.75 USD).
    Windows hours 0-1 then 1-2 (overlap) or 2: the same rows."""
    every = runs(tmp_path, "openai", _openai(range(3)), _openai(range(2)), _openai(range(1, 3)),
                 _openai(range(2, 3)), ("requests", "costs"))
    for table, got in every.items():
        assert got["overlap"] == got["full"] and got["disjoint"] == got["full"], table
        assert len(got["full"]) == 3
    b = store.load_bundle(tmp_path / "overlap.duckdb", tables=["requests", "costs"])
    assert b["costs"]["amount"].sum() == pytest.approx(0.75)
    assert b["requests"]["input_tokens"].sum() == 2400


def _otel(idx: range) -> str:
    """OTLP/JSON lines, one chat span per line: span i at 00:10 x i, 500 input / 20 output."""
    lines = []
    for i in idx:
        span = {"traceId": "ab" * 16, "spanId": f"{i:016x}", "name": "chat m", "kind": 3,
                "startTimeUnixNano": str((T0 + 600 * i) * 10**9), "endTimeUnixNano": str((T0 + 600 * i + 2) * 10**9),
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                               {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
                               {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "500"}},
                               {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "20"}}],
                "status": {"code": 1}}
        lines.append(json.dumps({"resourceSpans": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "app"}}]}, "scopeSpans": [{"spans": [span]}]}]}))
    return "\n".join(lines) + "\n"


def test_otel_hourly_windows(tmp_path):
    """Full: 12 spans (00:00-01:50), 6000 input tokens. Windows 0-5 then 3-11 or 6-11: the same."""
    got = runs(tmp_path, "otel", _otel(range(12)), _otel(range(6)), _otel(range(3, 12)), _otel(range(6, 12)),
               "requests", suffix=".jsonl")
    assert got["overlap"] == got["full"] and got["disjoint"] == got["full"]
    assert len(got["full"]) == 12 and sum(r[5] for r in got["full"]) == 6000


# ------------------------------------------------------------------------------------------- item 6: local times


def test_one_local_time_rule():
    """Europe/Berlin: 2026-10-25 02:30 happens twice (CEST then CET), 2026-03-29 02:30 never;
    01:30 on 2026-10-25 is CEST (UTC+2): 23:30Z the day before."""
    with pytest.raises(LocalTimeError, match=r"'2026-10-25T02:30:00' is ambiguous in Europe/Berlin"):
        parse_time("2026-10-25T02:30:00", "Europe/Berlin")
    with pytest.raises(LocalTimeError, match=r"'2026-03-29 02:30' does not exist in Europe/Berlin"):
        parse_time("2026-03-29 02:30", "Europe/Berlin")
    assert localize(datetime(2026, 10, 25, 1, 30), "Europe/Berlin") == datetime(2026, 10, 24, 23, 30,
                                                                                 tzinfo=timezone.utc)


BERLIN = '[period]\nsource_timezone = "Europe/Berlin"\n'


def test_slurm_refuses_ambiguous_and_missing_local_times(tmp_path):
    """Job 1 starts at the ambiguous 02:30 of 2026-10-25, job 2 ends at the nonexistent 02:30 of
    2026-03-29: both unmapped with file, row and reason; job 3 (01:00-02:00 CEST on 2026-10-01 =
    23:00Z-00:00Z) imports: 1 GPU-h."""
    f = write(tmp_path, "sacct.txt", f"{H}\n"
              "1|a|u|p|2026-10-25T02:00:00|2026-10-25T02:30:00|2026-10-25T04:00:00|COMPLETED|gres/gpu=1|n1\n"
              "2|a|u|p|2026-03-29T01:00:00|2026-03-29T01:00:00|2026-03-29T02:30:00|COMPLETED|gres/gpu=1|n1\n"
              "3|a|u|p|2026-10-01T01:00:00|2026-10-01T01:00:00|2026-10-01T02:00:00|COMPLETED|gres/gpu=1|n1\n")
    (tmp_path / "ailedger.toml").write_text(BERLIN)
    res = CliRunner().invoke(import_cmd, ["slurm", str(f), "--into", str(tmp_path), "--config",
                                          str(tmp_path / "ailedger.toml")])
    assert res.exit_code == 0, res.output
    assert ("sacct.txt row 2: job 1: Start '2026-10-25T02:30:00' is ambiguous in Europe/Berlin (DST change; "
            "give an offset)") in res.output
    assert ("sacct.txt row 3: job 2: End '2026-03-29T02:30:00' does not exist in Europe/Berlin (DST gap; "
            "give an offset)") in res.output
    a = pl.read_csv(tmp_path / "allocations.csv")
    assert a.select("job_id", "start", "end").rows() == [(3, "2026-09-30T23:00:00Z", "2026-10-01T00:00:00Z")]


def test_litellm_refuses_ambiguous_and_missing_local_times(tmp_path):
    """Offset-less spend logs in Europe/Berlin: r1 starts at the ambiguous 02:30 (validation's
    reason), r2 ends in the spring gap (the importer's reason, same rule); r3 imports."""
    from cost_engine.config import parse_config

    f = write(tmp_path, "spend.json", json.dumps([
        {"request_id": "r1", "team_id": "t", "model": "m", "prompt_tokens": 1, "completion_tokens": 1,
         "startTime": "2026-10-25T02:30:00", "endTime": "2026-10-25T03:30:00", "status": "success"},
        {"request_id": "r2", "team_id": "t", "model": "m", "prompt_tokens": 1, "completion_tokens": 1,
         "startTime": "2026-03-29T01:59:00", "endTime": "2026-03-29T02:30:00", "status": "success"},
        {"request_id": "r3", "team_id": "t", "model": "m", "prompt_tokens": 1, "completion_tokens": 1,
         "startTime": "2026-10-01T12:00:00", "endTime": "2026-10-01T12:00:02", "status": "success"}]))
    r = import_files("litellm", [f], parse_config({"period": {"source_timezone": "Europe/Berlin"}}))
    assert r.frames["requests"].select("request_id", "latency_ms").rows() == [("r3", 2000.0)]
    assert sorted(r.unmapped.select("row", "reason").rows()) == [
        (1, "request r1: startTime '2026-10-25T02:30:00' is ambiguous in Europe/Berlin (DST change; give an offset)"),
        (2, "request r2: endTime '2026-03-29T02:30:00' does not exist in Europe/Berlin (DST gap; give an offset)"),
    ]


# ------------------------------------------------------------------------------------------- item 16: hostlists


def test_hostlist_expansion_is_bounded(tmp_path):
    """gpu[1-20000000] names 20,000,000 nodes: refused before expanding, as the job's unmapped
    reason; gpu[01-02],x[1-3] names 5 and expands."""
    assert expand_hostlist("gpu[01-02],x[1-3]") == ["gpu01", "gpu02", "x1", "x2", "x3"]
    with pytest.raises(ValueError, match=r"names 20,000,000 nodes, more than the 100,000"):
        expand_hostlist("gpu[1-20000000]")
    f = write(tmp_path, "sacct.txt", f"{H}\n9|a|u|p|{iso(0)}|{iso(0)}|{iso(60)}|COMPLETED|gres/gpu=2|gpu[1-20000000]\n")
    r = import_files("slurm", [f])
    assert r.unmapped.select("row", "reason").rows() == [
        (2, "job 9: node list 'gpu[1-20000000]' names 20,000,000 nodes, more than the 100,000 a cluster can have")]


# ------------------------------------------------------------------------------------------- the merge itself


def test_merge_stored_bridges_stored_runs_and_keeps_other_identities():
    """Stored: pod p on card G [00:00, 01:00) id a and [02:00, 03:00) id c; pod q on G
    [00:30, 01:30) id q. Imported: p on G [00:50, 02:10) id b. p's three intervals overlap into
    one island [00:00, 03:00) under the earliest id a (3 h, instead of 1 + 1.333 + 1 = 3.333 h
    counted with the overlaps twice): a and c are superseded. q has another identity: untouched."""
    from cost_engine.continuation import merge_stored

    def alloc(aid, job, lo, hi):
        return {"allocation_id": aid, "gpu_id": "G", "start": at(lo), "end": at(hi), "owner": "ns",
                "source": "kubernetes", "share": 1.0, "workload": "other", "job_id": job}

    def frame(rows):
        return pl.DataFrame(rows).select([(pl.col(c.name).cast(c.dtype) if c.name in rows[0] else
                                           pl.lit(None, c.dtype)).alias(c.name) for c in TABLES["allocations"]])

    stored_rows = frame([alloc("a", "p", 0, 60), alloc("c", "p", 120, 180), alloc("q", "q", 30, 90)])
    write, gone = merge_stored("allocations", frame([alloc("b", "p", 50, 130)]), stored_rows)
    assert write.select("allocation_id", "start", "end").rows() == [("a", at(0), at(180))]
    assert sorted(gone["allocation_id"].to_list()) == ["a", "c"]
