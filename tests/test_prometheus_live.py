"""A real Prometheus server: fixture series backfilled with promtool, pulled over the HTTP API with
`ailedger import prometheus --url`, give exactly what the import of the same file gives.

The server (Debian's `prometheus`, installed by `make prometheus`) is started and stopped here,
bound to 127.0.0.1 on a port the system picks, over a TSDB that `promtool tsdb create-blocks-from
openmetrics` built from tests/fixtures/importers/gpu_cluster_range.om. With CI=true a missing
binary is a failure, not a skip.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine.bundle import read_bundle
from cost_engine.config import Config
from cost_engine.import_cli import import_cmd
from tests.helpers import stop_process

FIX = Path(__file__).parent / "fixtures" / "importers" / "gpu_cluster_range.om"
START, END = "2026-10-01T00:00:00Z", "2026-10-01T00:10:00Z"


def _binaries() -> tuple[str, str]:
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prom and promtool:
        return prom, promtool
    if os.environ.get("CI") == "true":
        pytest.fail("prometheus/promtool are not installed: `make prometheus` installs Debian's package")
    pytest.skip("prometheus/promtool are not installed (make prometheus)")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory):
    prom, promtool = _binaries()
    root = tmp_path_factory.mktemp("prometheus")
    data = root / "data"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(FIX), str(data)],
                   check=True, capture_output=True, timeout=120)
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")  # nothing to scrape
    log_path = root / "prometheus.log"
    log = log_path.open("wb")
    # Port 0: the system picks a free port when Prometheus binds, and its log says which ("Listening
    # on"), so no port is chosen here and released before the server takes it.
    # lookback-delta below the 60 s step: backfilled series carry no staleness markers, so a
    # series that ended would otherwise be repeated for 5 minutes (a scraped one is marked stale).
    proc = subprocess.Popen(
        [prom, f"--config.file={config}", f"--storage.tsdb.path={data}", "--web.listen-address=127.0.0.1:0",
         "--storage.tsdb.retention.time=100y", "--query.lookback-delta=30s"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        url = None
        for _ in range(600):  # up to a minute; each round waits on the process itself
            if url is None:
                bound = re.search(r'msg="Listening on" address=(127\.0\.0\.1:\d+)', log_path.read_text())
                url = f"http://{bound.group(1)}" if bound else None
            if url is not None and _ready(url):
                break
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"prometheus exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        else:
            pytest.fail("prometheus did not become ready within a minute")
        yield url
    finally:
        stop_process(proc)
        log.close()


def _tables(folder: Path) -> dict[str, pl.DataFrame]:
    b = read_bundle(folder, Config())
    return {t: b[t].sort(b[t].columns) for t in ("inventory", "allocations", "telemetry")}


def test_live_prometheus_import_equals_file_import(prometheus_url, tmp_path):
    """Over HTTP and from the file: 22 telemetry rows (2 cards x 11 minutes), 9 allocations (the
    vLLM pod on GPU-c4529c8d for [00:00, 00:05) from DCGM's pod labels; train-job-0's 2 GPUs as
    0.25 shares of gpu-node-2's 8 cards for [00:02, 00:07), owner `vision` from its team label),
    10 inventory cards (2 of gpu-node-1 in pool serving, 8 of gpu-node-2 in pool training)."""
    opts = ["--pool-label", "pool", "--owner-label", "team"]
    live = CliRunner().invoke(import_cmd, ["prometheus", "--url", prometheus_url, "--start", START, "--end", END,
                                           "--step", "60", *opts, "--into", str(tmp_path / "live")])
    assert live.exit_code == 0, live.output
    assert "  query 1: {__name__=~" in live.output
    assert "  allocations           9 rows" in live.output
    files = CliRunner().invoke(import_cmd, ["prometheus", str(FIX), *opts, "--into", str(tmp_path / "file")])
    assert files.exit_code == 0, files.output
    a, b = _tables(tmp_path / "live"), _tables(tmp_path / "file")
    for table in a:
        assert a[table].equals(b[table]), table
    assert [a[t].height for t in a] == [10, 9, 22]
    shares = a["allocations"].group_by("owner").agg(pl.col("share").sum(), pl.len()).sort("owner").rows()
    assert shares == [("dynamo-workload", 1.0, 1), ("vision", 2.0, 8)]


def test_live_vllm_import_equals_file_import(prometheus_url, tmp_path):
    """The same file's vLLM counters over HTTP: flat until 00:02, then +120 prompt, +40 output, 1
    request by 00:03 and +180/+60/2 by 00:05: two buckets, [00:02, 00:03) and [00:04, 00:05), owner
    dynamo-workload (its namespace), exactly as the file import gives them."""
    live = CliRunner().invoke(import_cmd, ["vllm", "--url", prometheus_url, "--start", START, "--end", END,
                                           "--step", "60", "--into", str(tmp_path / "live")])
    assert live.exit_code == 0, live.output
    files = CliRunner().invoke(import_cmd, ["vllm", str(FIX), "--into", str(tmp_path / "file")])
    assert files.exit_code == 0, files.output
    a = pl.read_csv(tmp_path / "live" / "requests.csv", infer_schema=False).sort("ts")
    b = pl.read_csv(tmp_path / "file" / "requests.csv", infer_schema=False).sort("ts")
    assert a.equals(b)
    assert a.select("ts", "owner", "input_tokens", "output_tokens", "requests").rows() == [
        ("2026-10-01T00:02:00Z", "dynamo-workload", "120", "40", "1"),
        ("2026-10-01T00:04:00Z", "dynamo-workload", "180", "60", "2")]


def test_live_prometheus_unreachable_is_a_clear_error(tmp_path):
    # A port held (bound, never listening) for the whole test: nothing else can take it, and a
    # connection to it is refused.
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        res = CliRunner().invoke(import_cmd, ["prometheus", "--url", f"http://127.0.0.1:{port}", "--start", START,
                                              "--end", END, "--into", str(tmp_path)])
    assert res.exit_code == 2
    assert f"error: http://127.0.0.1:{port}/api/v1/query_range: cannot reach Prometheus" in res.output


def test_live_prometheus_bad_period(prometheus_url, tmp_path):
    res = CliRunner().invoke(import_cmd, ["prometheus", "--url", prometheus_url, "--start", END, "--end", START,
                                          "--into", str(tmp_path)])
    assert res.exit_code == 2
    assert "error: --end 2026-10-01T00:00:00Z is not after --start 2026-10-01T00:10:00Z" in res.output
