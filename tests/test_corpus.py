"""The bad-input corpus: every malformed input produces its stated error, and the valid rest
of its bundle still counts.

`tests/corpus/_base/` is a minimal valid bundle: cards g1 and g2 in pool p1, allocations a1
(g1 00-06h, project A1), a2 (g2 00-12h, B1), a3 (g1 12-18h, A1), $48 of rental for the day
2026-10-01 (48 card-hours: $1 each), owners A/A1 and B/B1; its report: 24 allocated GPU-hours,
cost 48, A1 12, B1 12, idle 24. Each `tests/corpus/<case>/` holds the files that replace or
join the base files plus `expected.toml` (see tests/corpus/README.md for its keys). Inputs
that must be binary or big are made by GENERATORS here rather than committed.

Every case also runs through the streaming CSV reader (forced, with tiny chunks) and must
give exactly what the whole-file reader gives. The big-file tests measure memory in a
subprocess: `test_streaming_memory_is_bounded` (~100 MB, always) and
`test_two_gigabyte_csv_streams` (2 GB, only with AILEDGER_BIG_TESTS=1).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tomllib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import cost_engine.bundle_stream as bundle_mod  # the streaming thresholds live there
from cost_engine.bundle import BundleError, read_bundle
from cost_engine.config import Config, ConfigError, load_config, parse_config
from cost_engine.engine import compute
from cost_engine.report import build_report

CORPUS = Path(__file__).parent / "corpus"
BASE = CORPUS / "_base"
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and not p.name.startswith("_"))
REPO = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- generated inputs

ALLOC_TEXT = (BASE / "allocations.csv").read_text(encoding="utf-8")
REQ_LINE = (
    '{"request_id": "%s", "ts": "2026-10-01T01:00:00Z", "owner": "A1", "model": "m", '
    '"input_tokens": 100, "output_tokens": 50}'
)
TEN_MB = 10 * 2**20


def _gzip_named_csv(folder: Path) -> None:
    (folder / "allocations.csv").write_bytes(gzip.compress(ALLOC_TEXT.encode()))


def _corrupt_gzip(folder: Path) -> None:
    text = "ts,gpu_id,util_pct\n" + "".join(f"2026-10-01T01:{m:02d}:00Z,g1,50\n" for m in range(60))
    data = gzip.compress(text.encode())
    (folder / "telemetry.csv.gz").write_bytes(data[: len(data) // 2])


def _parquet_named_csv(folder: Path) -> None:
    pl.read_csv(folder / "allocations.csv").write_parquet(folder / "allocations.parquet")
    (folder / "allocations.parquet").rename(folder / "allocations.csv")


def _binary_garbage(folder: Path) -> None:
    (folder / "telemetry.csv").write_bytes(bytes(range(256)) * 4)


def _latin1_csv(folder: Path) -> None:
    text = ALLOC_TEXT.replace("T18:00:00Z,A1", "T18:00:00Z,Müller")  # a3's owner
    (folder / "allocations.csv").write_bytes(text.encode("latin-1"))


def _latin1_jsonl(folder: Path) -> None:
    (folder / "requests.jsonl").write_bytes((REQ_LINE % "r1" + "\n" + REQ_LINE % "Müller" + "\n").encode("latin-1"))


def _nul_jsonl(folder: Path) -> None:
    (folder / "requests.jsonl").write_bytes((REQ_LINE % "r1").encode() + b"\n\x00\x00\n")


def _bom_csv(folder: Path) -> None:
    (folder / "allocations.csv").write_bytes(b"\xef\xbb\xbf" + ALLOC_TEXT.encode())


def _bom_jsonl(folder: Path) -> None:
    text = REQ_LINE % "r1" + "\n" + REQ_LINE % "r2" + "\n"
    (folder / "requests.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())


def _crlf_csv(folder: Path) -> None:
    (folder / "allocations.csv").write_bytes(ALLOC_TEXT.replace("\n", "\r\n").encode())


def _big_field(folder: Path) -> None:
    rows = ALLOC_TEXT.strip().split("\n")
    note = "n" * TEN_MB
    text = "\n".join([rows[0] + ",comment", rows[1] + ",", rows[2] + f',"{note}"', rows[3] + ","]) + "\n"
    (folder / "allocations.csv").write_text(text, encoding="utf-8")
    tele = "ts,gpu_id,util_pct\n2026-10-01T01:00:00Z,g1,50\n2026-10-01T01:05:00Z,g1," + "x" * TEN_MB + "\n"
    (folder / "telemetry.csv").write_text(tele, encoding="utf-8")


GENERATORS: dict[str, Callable[[Path], None]] = {
    "gzip_named_csv": _gzip_named_csv,
    "corrupt_gzip": _corrupt_gzip,
    "parquet_named_csv": _parquet_named_csv,
    "binary_garbage": _binary_garbage,
    "latin1_csv": _latin1_csv,
    "latin1_jsonl": _latin1_jsonl,
    "nul_jsonl": _nul_jsonl,
    "bom_csv": _bom_csv,
    "bom_jsonl": _bom_jsonl,
    "crlf_csv": _crlf_csv,
    "big_field": _big_field,
}

# --------------------------------------------------------------------------- building a case


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def case_config(name: str, expected: dict[str, Any]) -> Config:
    """The case's config: its own ailedger.toml read by load_config when it has one, else the
    base config with the case's `config` tables merged over it (ConfigError when invalid)."""
    own = CORPUS / name / "ailedger.toml"
    if own.exists():
        return load_config(own)
    config_data = tomllib.loads((BASE / "ailedger.toml").read_text(encoding="utf-8"))
    return parse_config(_merge(config_data, expected.get("config", {})))


def build_case(name: str, tmp_path: Path) -> tuple[Path, Config, dict[str, Any]]:
    """The case's bundle folder (base files, overlaid by the case's), its config and expectations.

    A `config_error` case reads its bundle under the base config (its files are the base's):
    the error itself is checked by test_case.
    """
    case = CORPUS / name
    expected = tomllib.loads((case / "expected.toml").read_text(encoding="utf-8"))
    folder = tmp_path / name
    shutil.copytree(BASE, folder)
    (folder / "ailedger.toml").unlink()  # the config travels separately
    for f in case.iterdir():
        if f.name not in ("expected.toml", "ailedger.toml"):
            shutil.copyfile(f, folder / f.name)
    for gone in expected.get("remove", []):
        (folder / gone).unlink()
    if "generate" in expected:
        GENERATORS[expected["generate"]](folder)
    config = case_config("_base", {}) if "config_error" in expected else case_config(name, expected)
    return folder, config, expected


def test_corpus_is_big_enough_and_well_formed() -> None:
    assert len(CASES) >= 50
    allowed = {"error", "file", "remove", "generate", "config", "config_error", "rejected", "engine_rejected",
               "accepted", "notes", "gaps", "report"}
    for name in CASES:
        expected = tomllib.loads((CORPUS / name / "expected.toml").read_text(encoding="utf-8"))
        assert set(expected) <= allowed, (name, set(expected) - allowed)
        # each case states the error it must produce (a BundleError naming the file, or row
        # rejections, notes, gaps), and where the bundle reads, the proof that the rest counts
        if "error" in expected:
            assert "file" in expected, f"{name}: an error case names the file its message must name"
        elif "config_error" in expected:
            assert "config" in expected or (CORPUS / name / "ailedger.toml").exists(), name
        else:
            assert "accepted" in expected and "report" in expected, f"{name}: proof that the rest counts"
        assert "generate" not in expected or expected["generate"] in GENERATORS
    committed = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    assert committed < 64 * 1024, f"corpus files take {committed} bytes: generate big inputs in the test"


# --------------------------------------------------------------------------- the cases


def _check_rejections(bundle, expected: dict, name: str) -> None:
    got = bundle.rejected.sort("table", "row").rows(named=True)
    want = sorted(expected.get("rejected", []), key=lambda r: (r["table"], r["row"]))
    shown = [(g["table"], g["row"], g["reason"]) for g in got]
    assert len(got) == len(want), f"{name}: rejections {shown}"
    for g, w in zip(got, want):
        assert (g["table"], g["row"]) == (w["table"], w["row"]), f"{name}: rejections {shown}"
        assert w["reason"] in g["reason"], f"{name}: row {g['row']}: {g['reason']!r}"
        assert g["file"].startswith(g["table"] + "."), g  # the file is named
        assert len(g["reason"]) < 1000  # values are quoted cut short, even a 10 MB one


def _check_report(rep: dict, expected: dict, name: str) -> None:
    rc = rep["reconciliation"]
    assert abs(rc["difference"]) <= 1e-6 * max(1.0, abs(rc["input_cost"])), f"{name}: {rc}"
    for key, value in expected.get("report", {}).items():
        if key == "by_project":
            projects = {r["project"]: r["cost"] for r in rep["by_project"]}
            for project, cost in value.items():
                assert projects.get(project) == pytest.approx(cost, abs=1e-6), f"{name}: {project} {projects}"
        elif key in rc:
            assert rc[key] == pytest.approx(value, abs=1e-6), f"{name}: {key} {rc}"
        elif value == "unknown":  # TOML has no null: an unknown figure is written "unknown"
            assert rep["totals"][key] is None, f"{name}: {key} {rep['totals'][key]}"
        else:
            assert rep["totals"][key] == pytest.approx(value, abs=1e-6), f"{name}: {key} {rep['totals'][key]}"
    engine = [r for r in rep["rejected"] if r["row"] is None]
    want = expected.get("engine_rejected", [])
    assert len(engine) == len(want), f"{name}: engine rejections {engine}"
    for w in want:
        assert any(r["table"] == w["table"] and w["reason"] in r["reason"] for r in engine), engine
    for gap in expected.get("gaps", []):
        assert any(g["what"] == gap["what"] and gap["detail"] in g["detail"] for g in rep["gaps"]), \
            f"{name}: no gap {gap} in {rep['gaps']}"


@pytest.mark.parametrize("name", CASES)
def test_case(name: str, tmp_path: Path) -> None:
    folder, config, expected = build_case(name, tmp_path)
    if "config_error" in expected:
        # a config the engine would compute silently wrong with: refused, naming the key
        with pytest.raises(ConfigError) as err:
            case_config(name, expected)
        assert expected["config_error"] in str(err.value), str(err.value)
        assert len(str(err.value)) < 1000
        return
    if "error" in expected:
        with pytest.raises(BundleError) as err:
            read_bundle(folder, config)
        message = str(err.value)
        assert expected["error"] in message
        assert expected["file"] in message
        assert len(message) < 1000
        return
    bundle = read_bundle(folder, config)
    _check_rejections(bundle, expected, name)
    for table, rows in expected["accepted"].items():
        assert bundle[table].height == rows, f"{name}: {table} kept {bundle[table].height}"
    for note in expected.get("notes", []):
        assert any(w == note["what"] and note["detail"] in d for w, d in bundle.notes), f"{name}: {bundle.notes}"
    rep = build_report(compute(bundle, config))
    _check_report(rep, expected, name)


def _outcome(folder: Path, config: Config) -> tuple:
    try:
        b = read_bundle(folder, config)
    except BundleError as exc:
        return ("error", str(exc))
    return ("ok", b.tables, b.rejected, b.notes, b.present)


@pytest.mark.parametrize("name", CASES)
def test_case_streamed_alike(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The streaming CSV reader (forced here with 64-byte chunks, so every record boundary and
    cross-chunk duplicate is exercised) gives exactly the whole-file reader's result."""
    folder, config, _ = build_case(name, tmp_path)
    whole = _outcome(folder, config)
    monkeypatch.setattr(bundle_mod, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(bundle_mod, "STREAM_BATCH_BYTES", 64)
    streamed = _outcome(folder, config)
    assert whole[0] == streamed[0], (whole[:2], streamed[:2])
    if whole[0] == "error":
        assert streamed[1] == whole[1]
        return
    for table, frame in whole[1].items():
        assert_frame_equal(streamed[1][table], frame, check_dtypes=True)
    assert_frame_equal(streamed[2], whole[2])
    assert streamed[3] == whole[3]
    assert streamed[4] == whole[4]


# --------------------------------------------------------------------------- big files

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
BIG_ALLOC = (
    "allocation_id,gpu_id,start,end,owner\n"
    "a1,GPU-00000000-0000-4000-8000-000000000000,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z,A1\n"
)


def write_big_telemetry(path: Path, size_bytes: int, *, bad_every: int = 0) -> int:
    """A telemetry CSV of about size_bytes (64 cards, a sample every 10 s, ~70 bytes a row).

    With bad_every, every bad_every-th row has util_pct 101 (rejected). Returns the rows written.
    """
    written = rows = 0
    block_rows = 1_000_000
    with path.open("wb") as fh:
        header = b"ts,gpu_id,util_pct,power_w\n"
        fh.write(header)
        written += len(header)
        while written < size_bytes:
            i = pl.int_range(rows, rows + block_rows, eager=True, dtype=pl.Int64).alias("i")
            util = pl.col("i") % 101
            if bad_every:
                util = pl.when(pl.col("i") % bad_every == bad_every - 1).then(101).otherwise(util)
            block = pl.DataFrame(i).select(
                (pl.lit(T0) + pl.duration(seconds=(pl.col("i") // 64) * 10)).alias("ts"),
                pl.format(
                    "GPU-{}-0000-4000-8000-{}",
                    (pl.col("i") % 64).cast(pl.String).str.zfill(8),
                    (pl.col("i") % 64).cast(pl.String).str.zfill(12),
                ).alias("gpu_id"),
                util.alias("util_pct"),
                (300 + pl.col("i") % 7 + 0.5).alias("power_w"),
            )
            data = block.write_csv(include_header=False, datetime_format="%Y-%m-%dT%H:%M:%SZ").encode()
            if written + len(data) >= size_bytes:
                data = data[: data.rfind(b"\n", 0, max(1, size_bytes - written)) + 1] or data
            fh.write(data)
            written += len(data)
            rows += data.count(b"\n")
            if written >= size_bytes - 200:
                break
    return rows


_MEASURE = """
import json, sys, time
import cost_engine.bundle as cb
import cost_engine.bundle_stream as cs
if len(sys.argv) > 3:
    cs.STREAM_MIN_BYTES = int(sys.argv[3])
def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
cb.read_bundle(sys.argv[2])  # warm up: imports, thread pools, allocator
try:  # reset the high-water mark to the current RSS (Linux 4.0+)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError:
    pass
base = status("VmRSS")
start = time.perf_counter()
b = cb.read_bundle(sys.argv[1])
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: the latter keeps the parent's RSS from before exec.
peak = status("VmHWM")
rej = b.rejected
print(json.dumps({"base_mb": base, "peak_mb": peak, "growth_mb": peak - base, "seconds": seconds,
                  "rows": b["telemetry"].height, "rejected": rej.height,
                  "first_rejected": rej.head(2).rows(), "sum_util": b["telemetry"]["util_pct"].sum()}))
"""


def measure_read(folder: Path, tmp_path: Path, stream_min_bytes: int | None = None) -> dict:
    """read_bundle(folder) in a fresh interpreter: peak RSS growth over a warmed-up baseline."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the resident set size")
    small = tmp_path / "warmup"
    small.mkdir(exist_ok=True)
    (small / "allocations.csv").write_text(BIG_ALLOC, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", _MEASURE, str(folder), str(small)]
    if stream_min_bytes is not None:
        args.append(str(stream_min_bytes))
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\n{folder.name} (stream_min_bytes={stream_min_bytes}): {result}")
    return result


def test_streaming_memory_is_bounded(tmp_path: Path) -> None:
    """A ~100 MB telemetry CSV is streamed: memory grows by less than the file's size (measured
    ~90 MB), where the whole-file read of the same file grows by ~6x the file (~600 MB)."""
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "allocations.csv").write_text(BIG_ALLOC, encoding="utf-8")
    rows = write_big_telemetry(folder / "telemetry.csv", 100 * 2**20, bad_every=1000)
    file_mb = (folder / "telemetry.csv").stat().st_size / 2**20
    assert file_mb * 2**20 >= bundle_mod.STREAM_MIN_BYTES  # the streaming path, as in production
    streamed = measure_read(folder, tmp_path)
    assert streamed["rows"] + streamed["rejected"] == rows
    assert streamed["rejected"] == rows // 1000
    first = streamed["first_rejected"][0]
    assert first[1] == 1000 and "util_pct 101 outside 0..100" in first[2]
    assert streamed["growth_mb"] < 1.5 * file_mb, streamed  # well below the file size x 2

    whole = measure_read(folder, tmp_path, stream_min_bytes=2**62)  # the same file read whole
    assert (whole["rows"], whole["rejected"], whole["sum_util"]) == (
        streamed["rows"], streamed["rejected"], streamed["sum_util"])
    assert streamed["growth_mb"] < whole["growth_mb"] / 3, (streamed, whole)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("AILEDGER_BIG_TESTS") != "1", reason="set AILEDGER_BIG_TESTS=1 (writes 2 GB)")
def test_two_gigabyte_csv_streams(tmp_path: Path) -> None:
    """A 2 GB telemetry CSV reads with bounded memory (target: peak growth under 1.5 GB)."""
    folder = tmp_path / "huge"
    folder.mkdir()
    (folder / "allocations.csv").write_text(BIG_ALLOC, encoding="utf-8")
    rows = write_big_telemetry(folder / "telemetry.csv", 2 * 2**30, bad_every=1_000_000)
    result = measure_read(folder, tmp_path)
    assert result["rows"] + result["rejected"] == rows
    assert result["rejected"] == rows // 1_000_000
    assert result["peak_mb"] < 1536, result
