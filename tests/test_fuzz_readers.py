"""Hypothesis fuzzing of the bundle readers and of the engine behind them.

Readers: random bytes, random CSV-ish text, random JSONL lines and random values in valid
columns either read, with every input row accounted for (kept, rejected, an identical
duplicate counted once, or a blank CSV row skipped, each in a note), or fail with a
BundleError; never any other exception. The streaming CSV reader (forced, tiny chunks) gives
the same result as the whole-file reader on every CSV input.

Engine: any bundle the reader accepts from random row values computes, reports, and
reconciles: every input dollar lands in exactly one bucket, against an input side the test sums
itself from the accepted rows (tests/oracles.py: cost rows pro rata to the period, rates x
capacity, measured energy), never from the engine's frames. tests/test_reconciliation_property.py
checks the same on typed frames built in memory; here the rows come through the reader, hostile
values included.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import cost_engine.bundle_stream as bundle_mod  # the streaming thresholds live there
from cost_engine.bundle import BundleError, read_bundle
from cost_engine.config import parse_config
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests import oracles

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ALLOCATIONS = (
    "allocation_id,gpu_id,start,end,owner\n"
    "a1,g1,2026-10-01T00:00:00Z,2026-10-01T06:00:00Z,A1\n"
    "a2,g2,2026-10-01T00:00:00Z,2026-10-01T12:00:00Z,B1\n"
)
CONFIG = parse_config({"period": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"}})


@contextmanager
def bundle_dir(files: dict[str, bytes]) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="ailedger-fuzz-"))
    try:
        if "allocations.csv" not in files and "allocations.jsonl" not in files:
            (folder / "allocations.csv").write_text(ALLOCATIONS, encoding="utf-8")
        for name, data in files.items():
            (folder / name).write_bytes(data)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def read_or_error(folder: Path, *, stream: bool = False):
    """The bundle, or the BundleError message; any other exception fails the test."""
    saved = bundle_mod.STREAM_MIN_BYTES, bundle_mod.STREAM_BATCH_BYTES
    if stream:
        bundle_mod.STREAM_MIN_BYTES, bundle_mod.STREAM_BATCH_BYTES = 0, 48
    try:
        return read_bundle(folder, CONFIG)
    except BundleError as exc:
        assert str(exc), "a BundleError says what is wrong"
        return str(exc)
    finally:
        bundle_mod.STREAM_MIN_BYTES, bundle_mod.STREAM_BATCH_BYTES = saved


def counted_duplicates(bundle, table: str) -> int:
    prefix = f"{table}: "
    return sum(
        int(d[len(prefix):].split()[0]) for w, d in bundle.notes if w == "duplicate rows" and d.startswith(prefix)
    )


def blank_rows(bundle, file: str) -> int:
    prefix = f"{file}: "
    return sum(int(d[len(prefix):].split()[0]) for w, d in bundle.notes if w == "blank rows" and d.startswith(prefix))


def accounted(bundle, table: str, file: str) -> int:
    """Input rows the reader accounted for: kept + rejected + duplicates counted once + blank rows."""
    rejected = bundle.rejected.filter(pl.col("table") == table)
    assert rejected["row"].is_unique().all(), "each rejected row is listed once"
    return bundle[table].height + rejected.height + counted_duplicates(bundle, table) + blank_rows(bundle, file)


def csv_rows(data: bytes) -> int | None:
    """Data rows polars' own CSV parser sees in the text (None where it cannot parse it)."""
    try:
        return pl.read_csv(data, infer_schema=False, truncate_ragged_lines=False).height
    except pl.exceptions.NoDataError:
        return 0  # a blank file
    except Exception:
        return None


def assert_same(whole, streamed) -> None:
    if isinstance(whole, str) or isinstance(streamed, str):
        assert whole == streamed
        return
    for table, frame in whole.tables.items():
        assert_frame_equal(streamed.tables[table], frame)
    assert_frame_equal(streamed.rejected, whole.rejected)
    assert streamed.notes == whole.notes


# --------------------------------------------------------------------------- random bytes


@FUZZ
@given(
    data=st.binary(max_size=400),
    name=st.sampled_from(["telemetry.csv", "allocations.csv", "requests.jsonl", "costs.csv.gz",
                          "telemetry.parquet", "queue.jsonl.gz"]),
)
def test_random_bytes(data: bytes, name: str) -> None:
    with bundle_dir({name: data}) as folder:
        got = read_or_error(folder)
        if not isinstance(got, str) and name.endswith(".csv"):
            assert_same(got, read_or_error(folder, stream=True))


# --------------------------------------------------------------------------- CSV-ish text

TELEMETRY_COLUMNS = ["ts", "gpu_id", "util_pct", "power_w", "energy_j", "_row", "extra", ""]
CSV_ATOMS = st.sampled_from([
    ",", ",", ",", "\n", "\n", "\r\n", '"', '""', ";", "\t", " ", "\ufeff", "\x00", "é",
    "2026-10-01T00:00:00Z", "2026-10-01T00:05:00+02:00", "2026-10-01T00:00:00", "1790812800", "g1", "g2",
    "50", "-1", "101", "NaN", "inf", "1e308", "12.5", "", "abc",
])


@st.composite
def csv_texts(draw) -> bytes:
    header = draw(st.lists(st.sampled_from(TELEMETRY_COLUMNS), min_size=1, max_size=6))
    if draw(st.booleans()):  # mostly a usable header, so the rows get exercised
        header = ["ts", "gpu_id", "util_pct", *header]
    body = "".join(draw(st.lists(CSV_ATOMS, max_size=80)))
    text = ",".join(header) + "\n" + body
    return text.encode("utf-8")


@FUZZ
@given(data=csv_texts())
def test_random_csv_text(data: bytes) -> None:
    with bundle_dir({"telemetry.csv": data}) as folder:
        got = read_or_error(folder)
        assert_same(got, read_or_error(folder, stream=True))
        if isinstance(got, str):
            assert "telemetry.csv" in got
            return
        rows = csv_rows(data)
        assert rows is not None
        assert accounted(got, "telemetry", "telemetry.csv") == rows


# --------------------------------------------------------------------------- JSONL lines

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12) | st.sampled_from(["2026-10-01T00:00:00Z", "1790812800", "g1", "A1", "m", "ok"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
REQUEST_KEYS = st.sampled_from(["request_id", "ts", "owner", "model", "input_tokens", "output_tokens",
                                "cached_input_tokens", "status", "requests", "end", "latency_ms", "x"])


@st.composite
def jsonl_lines(draw) -> list[str]:
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["object", "object", "object", "broken", "scalar", "blank"]))
        if kind == "object":
            obj = draw(st.dictionaries(REQUEST_KEYS, JSON_VALUES, max_size=8))
            base = {"request_id": f"r{len(lines)}", "ts": "2026-10-01T00:00:00Z", "owner": "A1", "model": "m",
                    "input_tokens": 1, "output_tokens": 1}
            line = json.dumps({**base, **obj} if draw(st.booleans()) else obj, allow_nan=True)
        elif kind == "broken":
            line = draw(st.text(max_size=20).filter(lambda t: "\n" not in t and "\r" not in t))
        elif kind == "scalar":
            line = json.dumps(draw(JSON_VALUES), allow_nan=True)
        else:
            line = draw(st.sampled_from(["", "  "]))
        lines.append(line)
    return lines


@FUZZ
@given(lines=jsonl_lines())
def test_random_jsonl_lines(lines: list[str]) -> None:
    data = "\n".join(lines).encode("utf-8")
    with bundle_dir({"requests.jsonl": data}) as folder:
        got = read_or_error(folder)
        if isinstance(got, str):
            assert "requests.jsonl" in got
            return
        text_lines = data.decode("utf-8").split("\n")
        # str.split("\n") is what the line reader numbers; \r and other separators stay inside lines
        non_blank = sum(1 for line in text_lines if line.strip())
        assert accounted(got, "requests", "requests.jsonl") == non_blank


# --------------------------------------------------------------------------- values in valid columns

TS_TEXT = st.sampled_from([
    "2026-10-01T00:00:00Z", "2026-10-01T03:30:00+02:00", "2026-10-01 05:00Z", "1790812800", "1790812800.5",
    "1790812800000", "2026-10-01T00:00:00", "2026-13-01T00:00:00Z", "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z", "", "never", "2026-10-01T12:00:00.123456789Z",
])
NUM_TEXT = st.one_of(
    st.sampled_from(["0", "1", "-1", "100", "100.0001", "NaN", "inf", "-inf", "1e308", "9223372036854775807",
                     "99999999999999999999", "", "1,5", "12%", " 7 "]),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.integers(-10**6, 10**6).map(str),
)
ID_TEXT = st.sampled_from(["a1", "a2", "a3", "g1", "g2", "g9", "A1", "B1", "", " x ", "é", '"q"', "k,1"])


def csv_line(values: list[str]) -> str:
    out = []
    for v in values:
        out.append('"' + v.replace('"', '""') + '"' if any(c in v for c in ',"\n') else v)
    return ",".join(out)


@FUZZ
@given(rows=st.lists(st.tuples(TS_TEXT, ID_TEXT, NUM_TEXT, NUM_TEXT), max_size=15))
def test_random_values_in_valid_columns(rows: list[tuple[str, str, str, str]]) -> None:
    text = "ts,gpu_id,util_pct,power_w\n" + "".join(csv_line(list(r)) + "\n" for r in rows)
    with bundle_dir({"telemetry.csv": text.encode()}) as folder:
        got = read_or_error(folder)
        assert not isinstance(got, str), got  # well-formed CSV: only row-level problems
        assert_same(got, read_or_error(folder, stream=True))
        assert accounted(got, "telemetry", "telemetry.csv") == len(rows)
        util = got["telemetry"]["util_pct"]
        assert ((util >= 0) & (util <= 100)).all()


# --------------------------------------------------------------------------- engine on accepted bundles



def _ts(hours: float) -> str:
    base = 1790812800  # 2026-10-01T00:00:00Z
    return str(base + int(hours * 3600))


TIME_TEXT = st.one_of(
    st.integers(-30, 60).map(_ts),
    st.sampled_from(["2026-10-01T00:00:00Z", "2026-10-01T06:00:00+02:00", "2026-10-02T00:00:00Z", "bad", "",
                     "2026-10-01T10:00:00"]),
)
AMOUNT_TEXT = st.one_of(st.floats(0, 1e6, allow_nan=False).map(repr),
                        st.sampled_from(["0", "-5", "NaN", "inf", "1e15", "1e16", ""]))
SHARE_TEXT = st.sampled_from(["", "1", "0.5", "0.25", "0", "1.5", "NaN"])
CATEGORY_TEXT = st.sampled_from(["gpu_rental", "power", "software", "network", "depreciation", "electricity", ""])
POOL_TEXT = st.sampled_from(["", "p1", "p2", "p9"])
OWNER_TEXT = st.sampled_from(["A1", "B1", "acct_x", ""])
TOKENS_TEXT = st.one_of(st.integers(0, 10**9).map(str), st.sampled_from(["-1", "1.5", "1e20", "", "7"]))


@st.composite
def engine_bundles(draw) -> dict[str, bytes]:
    inventory = ["gpu_id,pool,capacity"] + [
        f"g{i},{draw(st.sampled_from(['p1', 'p2']))},{draw(st.sampled_from(['1', '0.5', '0.4286', '', '0', '2']))}"
        for i in range(draw(st.integers(1, 3)))
    ]
    allocations = ["allocation_id,gpu_id,start,end,owner,share,workload,model,job_id"]
    for i in range(draw(st.integers(0, 8))):
        inference = draw(st.booleans())
        allocations.append(",".join([
            f"a{draw(st.integers(0, 9))}", f"g{draw(st.integers(0, 3))}", draw(TIME_TEXT), draw(TIME_TEXT),
            draw(OWNER_TEXT), draw(SHARE_TEXT), "inference" if inference else draw(st.sampled_from(["training", ""])),
            draw(st.sampled_from(["m", "n"])) if inference else "", draw(st.sampled_from(["j1", ""])),
        ]))
    costs = ["cost_id,category,amount,currency,start,end,pool,owner"] + [
        ",".join([f"c{draw(st.integers(0, 6))}", draw(CATEGORY_TEXT), draw(AMOUNT_TEXT),
                  draw(st.sampled_from(["", "USD", "EUR"])), draw(TIME_TEXT), draw(TIME_TEXT), draw(POOL_TEXT),
                  draw(st.sampled_from(["", "", "A1", "k_unmapped"]))])
        for _ in range(draw(st.integers(0, 5)))
    ]
    telemetry = ["ts,gpu_id,util_pct,power_w,energy_j"] + [
        ",".join([draw(TIME_TEXT), f"g{draw(st.integers(0, 3))}", draw(NUM_TEXT), draw(AMOUNT_TEXT), draw(AMOUNT_TEXT)])
        for _ in range(draw(st.integers(0, 10)))
    ]
    requests = ["request_id,ts,owner,model,input_tokens,output_tokens,cached_input_tokens"] + [
        ",".join([f"r{draw(st.integers(0, 6))}", draw(TIME_TEXT), draw(st.sampled_from(["A1", "B1", "key_z"])),
                  draw(st.sampled_from(["m", "n"])), draw(TOKENS_TEXT), draw(TOKENS_TEXT), draw(TOKENS_TEXT)])
        for _ in range(draw(st.integers(0, 5)))
    ]
    # Rate windows may start before and end after the period, or be open ("").
    rates = ["pool,price_per_gpu_hour,start,end"] + [
        f"{draw(POOL_TEXT)},{draw(AMOUNT_TEXT)},{draw(st.sampled_from(['', '', draw(TIME_TEXT)]))},"
        f"{draw(st.sampled_from(['', '', draw(TIME_TEXT)]))}"
        for _ in range(draw(st.integers(0, 2)))
    ]
    owners = "tenant,project\nA,A1\nB,B1\n"
    files = {
        "allocations.csv": allocations, "inventory.csv": inventory, "costs.csv": costs,
        "telemetry.csv": telemetry, "requests.csv": requests, "rates.csv": rates,
    }
    out = {name: ("\n".join(lines) + "\n").encode() for name, lines in files.items()}
    out["owners.csv"] = owners.encode()
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=engine_bundles(), idle=st.sampled_from(["separate", "proportional"]),
       recharge=st.sampled_from(["none", "tokens", "requests"]))
def test_engine_reconciles_on_any_accepted_bundle(files: dict[str, bytes], idle: str, recharge: str) -> None:
    config = parse_config({
        "period": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"},
        "allocation": {"idle": idle, "inference_recharge": recharge},
    })
    with bundle_dir(files) as folder:
        try:
            bundle = read_bundle(folder, config)
        except BundleError:
            assume(False)
            return
        rep = build_report(compute(bundle, config))
    rc = rep["reconciliation"]
    assert math.isfinite(rc["input_cost"])
    # The input side summed from the accepted rows by the test itself, never from the engine's frames.
    expected = oracles.input_cost(bundle, config)
    assert rc["input_cost"] == pytest.approx(expected, rel=1e-9, abs=1e-6), rc
    assert rc["attributed"] + rc["idle"] + rc["unattributed"] == pytest.approx(expected, rel=1e-9, abs=1e-6), rc
    assert min(rc["attributed"], rc["idle"], rc["unattributed"]) >= -1e-6 * max(1.0, rc["input_cost"])
    t = rep["totals"]
    if t["available_gpu_hours"] is not None:  # None: no usable inventory, capacity unknown
        assert t["allocated_gpu_hours"] <= t["available_gpu_hours"] + 1e-9
    assert all(v >= 0 for k, v in t.items() if k.endswith("tokens") and isinstance(v, int))
    json.dumps(rep, allow_nan=False)  # plain JSON numbers: no NaN or inf anywhere in the report
