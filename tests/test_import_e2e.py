"""End to end: a Slurm export, a DCGM range query and a LiteLLM log written from one canonical
bundle, imported into one folder, give the same report as the canonical bundle itself."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine.bundle import Bundle, read_bundle
from cost_engine.config import load_config
from cost_engine.contract import make_frame
from cost_engine.engine import compute
from cost_engine.import_cli import import_cmd
from cost_engine.importers import frame_as_text
from cost_engine.report import build_report

UTC = timezone.utc
DAY = datetime(2026, 10, 1, tzinfo=UTC)
STEP = 300  # telemetry every 5 minutes
CONFIG = """\
[period]
start = 2026-10-01T00:00:00Z
end = 2026-10-02T00:00:00Z
source_timezone = "UTC"
"""


def at(h: float) -> datetime:
    return DAY + timedelta(hours=h)


# ------------------------------------------------------------------------------------------- the fleet

SLURM_NODES = {"gpu001": "train", "gpu002": "train"}
CARDS = [  # gpu_id, pool, node, index, capacity
    *[(f"GPU-{n}-{i}", p, n, str(i), 1.0) for n, p in SLURM_NODES.items() for i in range(4)],
    ("GPU-k8s-0", "infer", "k8s-a", "0", 1.0),
    ("GPU-k8s-1/1", "infer", "k8s-a", "1/1", 3 / 7),  # a MIG 3g.40gb instance
]
# Slurm jobs: job, account, nodes, GPUs per node, start h, end h, requested GPUs
JOBS = [
    ("101", "acct_a", ["gpu001"], 4, 1, 9, 4),
    ("102", "acct_b", ["gpu002"], 2, 2, 6, 4),
    ("103", "acct_a", ["gpu002"], 4, 6, 12, 4),
    ("104", "acct_b", ["gpu001", "gpu002"], 4, 12, 20, 8),
    ("106", "acct_ghost", ["gpu001"], 2, 20, 22, 2),  # an account no alias maps: unattributed
]
PENDING = ("105", "acct_b", "train", 8, 20.0)  # job, account, partition, GPUs, submit h (Resources)
# Kubernetes pods: namespace, pod, card, start h, end h
PODS = [
    ("team-x", "train-a", "GPU-k8s-0", 0, 6),
    ("team-y", "serve-b", "GPU-k8s-0", 8, 16),
    ("team-y", "notebook-c", "GPU-k8s-1/1", 10, 14),
]


def util_of(gpu: str, k: int) -> float:
    if gpu.endswith("/1"):
        return [0.0, 25.0, 50.0, 75.0][k % 4]  # exact through DCGM_FI_PROF_GR_ENGINE_ACTIVE (x/100*100)
    return float((k * 7 + sum(map(ord, gpu))) % 101)


def canonical() -> tuple[dict[str, pl.DataFrame], str]:
    inventory = make_frame("inventory", [
        {"gpu_id": g, "pool": p, "node": n, "accelerator": "NVIDIA H100 80GB HBM3", "capacity": c}
        for g, p, n, _, c in CARDS
    ]).with_columns(pl.Series("index", [i for *_, i, _ in CARDS]))
    allocations = []
    for job, acct, nodes, per, h0, h1, req in JOBS:
        for node in nodes:
            # Cards are handed out lowest index first (what the importer does without an IDX list).
            for i in range(per):
                allocations.append({"allocation_id": f"slurm:{job}:{node}:{i}", "gpu_id": f"GPU-{node}-{i}",
                                    "start": at(h0), "end": at(h1), "owner": acct, "source": "scheduler",
                                    "job_id": job, "requested_gpus": float(req)})
    for ns, pod, gpu, h0, h1 in PODS:
        allocations.append({"allocation_id": f"k8s:{ns}/{pod}:{gpu}:{at(h0):%Y%m%dT%H%M%SZ}", "gpu_id": gpu,
                            "start": at(h0), "end": at(h1), "owner": ns, "source": "kubernetes", "job_id": pod})
    telemetry = []
    for gpu, *_ in CARDS:
        energy = 5_000_000.0
        for k in range(24 * 3600 // STEP):
            u = util_of(gpu, k)
            mig = "/" in gpu
            power = None if mig else 100.0 + 5 * u
            telemetry.append({"ts": DAY + timedelta(seconds=k * STEP), "gpu_id": gpu, "util_pct": u,
                              "power_w": power, "energy_j": None if mig else energy,
                              "mem_used_mib": 20480.0 if mig else 1000.0 + 10 * u})
            if not mig:
                energy += power * STEP
    requests = []
    owners = ["team-chat", "team-a", "team-ghost"]
    for k in range(30):
        ts = at(0.5 + k * 0.75) + timedelta(milliseconds=k * 37)
        requests.append({"request_id": f"req-{k:03d}", "ts": ts, "owner": owners[k % 3], "source": "litellm",
                         "model": "llama-3.1-8b" if k % 2 else "qwen-32b", "input_tokens": 100 + 13 * k,
                         "cached_input_tokens": (k % 4) * 64, "output_tokens": 50 + 7 * k,
                         "status": "error" if k % 10 == 9 else "ok", "ttft_ms": float(120 + k),
                         "latency_ms": float(1500 + 11 * k)})
    tables = {
        "inventory": inventory,
        "allocations": make_frame("allocations", allocations),
        "telemetry": make_frame("telemetry", telemetry),
        "requests": make_frame("requests", requests),
        "queue": make_frame("queue", [{"job_id": PENDING[0], "owner": PENDING[1], "pool": PENDING[2],
                                       "gpus": float(PENDING[3]), "submit": at(PENDING[4]), "reason": "resources"}]),
        "costs": make_frame("costs", [
            {"cost_id": "dep-train", "category": "depreciation", "amount": 960.0, "start": at(0), "end": at(24),
             "pool": "train"},
            {"cost_id": "dep-infer", "category": "depreciation", "amount": 300.0, "start": at(0), "end": at(24),
             "pool": "infer"},
            {"cost_id": "net", "category": "network", "amount": 120.0, "start": at(0), "end": at(24)},
            {"cost_id": "ops-a", "category": "operations", "amount": 40.0, "start": at(0), "end": at(24),
             "owner": "p-a"},
        ]),
        "owners": make_frame("owners", [
            {"tenant": "research", "project": "p-a"}, {"tenant": "research", "project": "p-x"},
            {"tenant": "product", "project": "p-b"}, {"tenant": "product", "project": "p-y"},
            {"tenant": "product", "project": "p-chat"},
        ]),
        "aliases": make_frame("aliases", [
            {"source": "scheduler", "key": "acct_a", "project": "p-a"},
            {"source": "scheduler", "key": "acct_b", "project": "p-b"},
            {"source": "kubernetes", "key": "team-x", "project": "p-x"},
            {"source": "kubernetes", "key": "team-y", "project": "p-y"},
            {"source": "litellm", "key": "team-chat", "project": "p-chat"},
            {"source": "litellm", "key": "team-a", "project": "p-a"},
        ]),
    }
    return tables, CONFIG


# ------------------------------------------------------------------------------------------- the exports


def naive(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")  # sacct prints local time without offset


def write_sacct(tables, path) -> None:
    a = tables["allocations"].filter(pl.col("source") == "scheduler")
    lines = ["JobID|Account|User|Partition|Submit|Start|End|State|AllocTRES|ReqTRES|NodeList|Reason"]
    for job, acct, nodes, per, h0, h1, req in JOBS:
        rows = a.filter(pl.col("job_id") == job)
        n = rows.height
        assert n == per * len(nodes)
        nodelist = nodes[0] if len(nodes) == 1 else f"gpu[{','.join(x[3:] for x in nodes)}]"
        lines.append("|".join([
            job, acct, "someone", "train", naive(at(h0) - timedelta(minutes=3)), naive(rows["start"][0]),
            naive(rows["end"][0]), "COMPLETED", f"billing={8 * n},cpu={8 * n},gres/gpu={n},mem={64 * n}G,node={len(nodes)}",
            f"billing={8 * req},cpu={8 * req},gres/gpu={req},node={len(nodes)}", nodelist, "None"]))
        lines.append("|".join([f"{job}.batch", acct, "", "", "", naive(rows["start"][0]), naive(rows["end"][0]),
                               "COMPLETED", f"cpu=8,gres/gpu={n},mem=64G,node=1", "", nodes[0], ""]))
    job, acct, part, gpus, h = PENDING
    lines.append("|".join([job, acct, "someone", part, naive(at(h)), "Unknown", "Unknown", "PENDING", "",
                           f"billing=64,cpu=64,gres/gpu={gpus},node=2", "None assigned", "Resources"]))
    path.write_text("\n".join(lines) + "\n")


def write_dcgm(tables, path) -> None:
    """One query_range response with every metric; a series per (metric, card, pod on it)."""
    inv = {r["gpu_id"]: r for r in tables["inventory"].iter_rows(named=True)}
    pods = tables["allocations"].filter(pl.col("source") == "kubernetes")
    result = []
    tel = tables["telemetry"].sort("gpu_id", "ts")
    for gpu, frame in tel.group_by("gpu_id", maintain_order=True):
        gpu = gpu[0]
        card = inv[gpu]
        labels = {"gpu": card["index"].split("/")[0], "UUID": gpu.split("/")[0], "device": "nvidia0",
                  "modelName": card["accelerator"], "Hostname": card["node"], "namespace": "gpu-operator",
                  "pod": "nvidia-dcgm-exporter-x1", "instance": f"{card['node']}:9400", "job": "dcgm"}
        if "/" in gpu:
            labels |= {"GPU_I_ID": gpu.split("/")[1], "GPU_I_PROFILE": "3g.40gb"}
        here = pods.filter(pl.col("gpu_id") == gpu)
        metrics = ([("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "util_pct", lambda x: repr(x / 100))] if "/" in gpu else
                   [("DCGM_FI_DEV_GPU_UTIL", "util_pct", lambda x: str(int(x))),
                    ("DCGM_FI_DEV_POWER_USAGE", "power_w", repr),
                    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", lambda x: str(int(x * 1000)))]) + \
            [("DCGM_FI_DEV_FB_USED", "mem_used_mib", repr)]
        for name, col, fmt in metrics:
            series: dict[tuple, list] = {}
            for r in frame.iter_rows(named=True):
                on = here.filter((pl.col("start") <= r["ts"]) & (pl.col("end") > r["ts"]))
                key = (on["owner"][0], on["job_id"][0]) if on.height else None
                series.setdefault(key, []).append([r["ts"].timestamp(), fmt(r[col])])
            for key, values in series.items():
                lab = {"__name__": name, **labels}
                if key:
                    lab |= {"exported_namespace": key[0], "exported_pod": key[1], "exported_container": "main"}
                result.append({"metric": lab, "values": values})
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))


def write_litellm(tables, path) -> None:
    logs = []
    for r in tables["requests"].iter_rows(named=True):
        iso = lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # noqa: E731
        logs.append({
            "request_id": r["request_id"], "call_type": "acompletion", "api_key": "hashed-" + r["owner"],
            "team_id": r["owner"], "model": f"hosted_vllm/{r['model']}", "model_group": r["model"],
            "prompt_tokens": r["input_tokens"] + r["cached_input_tokens"], "completion_tokens": r["output_tokens"],
            "total_tokens": r["input_tokens"] + r["cached_input_tokens"] + r["output_tokens"],
            "startTime": iso(r["ts"]), "endTime": iso(r["ts"] + timedelta(milliseconds=r["latency_ms"])),
            "completionStartTime": iso(r["ts"] + timedelta(milliseconds=r["ttft_ms"])),
            "status": "success" if r["status"] == "ok" else "failure",
            "metadata": {"usage_object": {"prompt_tokens_details": {"cached_tokens": r["cached_input_tokens"]}}},
        })
    path.write_text(json.dumps(logs, indent=1))


# ------------------------------------------------------------------------------------------- the test


def approx_equal(a, b, path="report"):
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            approx_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            approx_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    else:
        assert a == b, path


def test_three_exports_of_one_fleet_give_the_canonical_report(tmp_path):
    tables, cfg_text = canonical()
    cfg_file = tmp_path / "canonical.toml"
    cfg_file.write_text(cfg_text)
    config = load_config(cfg_file)
    expected = build_report(compute(Bundle.from_frames(tables), config))

    exports = tmp_path / "exports"
    exports.mkdir()
    write_sacct(tables, exports / "sacct.txt")
    write_dcgm(tables, exports / "dcgm.json")
    write_litellm(tables, exports / "spend_logs.json")

    target = tmp_path / "imported"
    target.mkdir()
    (target / "ailedger.toml").write_text(cfg_text)
    for t in ("inventory", "owners", "aliases", "costs"):  # what no export carries
        frame_as_text(tables[t]).write_csv(target / f"{t}.csv")

    runner = CliRunner()
    for fmt, f in (("slurm", "sacct.txt"), ("prometheus", "dcgm.json"), ("litellm", "spend_logs.json")):
        res = runner.invoke(import_cmd, [fmt, str(exports / f), "--into", str(target), "--strict"])
        assert res.exit_code == 0, res.output
        assert "unmapped" not in res.output, res.output

    bundle = read_bundle(target, config)
    assert bundle.rejected.height == 0
    for t in ("allocations", "telemetry", "requests", "queue"):
        keys = {"allocations": ["allocation_id"], "telemetry": ["gpu_id", "ts"], "requests": ["request_id"],
                "queue": ["job_id"]}[t]
        got = bundle[t].select(tables[t].columns).sort(keys)
        want = tables[t].sort(keys)
        assert got.equals(want), t

    actual = build_report(compute(bundle, config))
    for part in ("totals", "by_tenant", "by_project", "reconciliation", "unattributed", "idle", "rejected"):
        approx_equal(actual[part], expected[part], part)
    # The fleet is busy enough for the comparison to mean something.
    assert expected["totals"]["allocated_gpu_hours"] > 100
    assert expected["totals"]["energy_kwh_gpu"] > 50 and expected["totals"]["input_tokens"] > 0
    assert expected["reconciliation"]["unattributed"] > 0 and expected["reconciliation"]["idle"] > 0
    assert {u["key"] for u in expected["unattributed"]} == {"acct_ghost", "team-ghost"}
    assert {r["cause"] for r in expected["idle"]} >= {"fragmentation", "no_demand"}
    assert {r["tenant"] for r in expected["by_tenant"]} == {"research", "product"}
