"""Reading bundle folders: every format validates alike, and every bad row is rejected by number."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cost_engine.bundle import ROW, BundleError, read_bundle, validate_frame
from cost_engine.config import Config
from cost_engine.contract import TABLE_NAMES, schema

UTC = timezone.utc

ALLOC_HEADER = "allocation_id,gpu_id,start,end,owner"
ALLOC_ROWS = [
    ["a1", "g1", "2026-10-01T00:00:00Z", "2026-10-01T03:00:00Z", "team-a"],
    ["a2", "g2", "2026-10-01T01:00:00+02:00", "2026-10-01T02:30:00.250+02:00", "team-b"],
]


def write_csv(folder: Path, name: str, header: str, rows: list[list[str]]) -> Path:
    path = folder / name
    path.write_text("\n".join([header, *(",".join(r) for r in rows)]) + "\n", encoding="utf-8")
    return path


def write_jsonl(folder: Path, name: str, records: list[dict | str]) -> Path:
    """Records are dicts (dumped) or raw line text (written as is)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def allocations(folder: Path, rows: list[list[str]] | None = None, header: str = ALLOC_HEADER) -> Path:
    return write_csv(folder, "allocations.csv", header, ALLOC_ROWS if rows is None else rows)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def rejected_rows(bundle, table: str) -> list[tuple[int, str]]:
    rej = bundle.rejected.filter(pl.col("table") == table).sort("row")
    return list(zip(rej["row"].to_list(), rej["reason"].to_list()))


def alloc_ids(bundle) -> list[str]:
    return bundle["allocations"]["allocation_id"].to_list()


# --------------------------------------------------------------------------- formats


def _alloc_records() -> list[dict]:
    keys = ALLOC_HEADER.split(",")
    return [dict(zip(keys, r)) for r in ALLOC_ROWS]


@pytest.mark.parametrize("fmt", ["csv.gz", "parquet", "jsonl", "jsonl.gz"])
def test_every_format_reads_the_same_frame(tmp_path: Path, fmt: str) -> None:
    csv_dir, other = tmp_path / "csv", tmp_path / fmt
    csv_dir.mkdir()
    other.mkdir()
    allocations(csv_dir)
    records = _alloc_records()
    target = other / f"allocations.{fmt}"
    if fmt == "csv.gz":
        target.write_bytes(gzip.compress((csv_dir / "allocations.csv").read_bytes()))
    elif fmt == "parquet":
        pl.DataFrame(records).write_parquet(target)
    elif fmt == "jsonl":
        write_jsonl(other, target.name, records)
    else:
        target.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in records).encode()))

    expected, got = read_bundle(csv_dir), read_bundle(other)
    assert_frame_equal(got["allocations"], expected["allocations"])
    assert got.rejected.height == 0 and expected.rejected.height == 0
    assert got.present == frozenset({"allocations"})
    frame = expected["allocations"]
    assert frame.schema == schema("allocations")
    assert frame["allocation_id"].to_list() == ["a1", "a2"]
    assert frame["end"].to_list() == [utc(2026, 10, 1, 3), datetime(2026, 10, 1, 0, 30, 0, 250000, tzinfo=UTC)]
    # defaults filled from the contract
    assert frame["source"].to_list() == ["scheduler", "scheduler"]
    assert frame["share"].to_list() == [1.0, 1.0]
    assert frame["workload"].to_list() == ["other", "other"]


def test_every_table_is_present_with_canonical_schema(tmp_path: Path) -> None:
    allocations(tmp_path)
    bundle = read_bundle(tmp_path)
    assert set(bundle.tables) == set(TABLE_NAMES)
    for table in TABLE_NAMES:
        assert list(bundle[table].schema.items())[: len(schema(table))] == list(schema(table).items())
    assert bundle["telemetry"].height == 0


def test_parquet_typed_columns(tmp_path: Path) -> None:
    """Typed Parquet columns skip text parsing: aware datetimes convert, naive ones follow the offset rule."""
    allocations(tmp_path)
    pl.DataFrame(
        {
            "ts": [utc(2026, 10, 1, 0, 0), utc(2026, 10, 1, 0, 1)],
            "gpu_id": ["g1", "g1"],
            "util_pct": [50, 101],
            "power_w": [300.0, float("nan")],
        },
        schema_overrides={"ts": pl.Datetime("ms", "Europe/Berlin")},
    ).write_parquet(tmp_path / "telemetry.parquet")
    pl.DataFrame({"tenant": ["t"], "pool": ["p"], "gpus": [4]}).write_parquet(tmp_path / "quotas.parquet")
    pl.DataFrame(
        {"start": [datetime(2026, 10, 1)], "end": [datetime(2026, 10, 2)], "price_per_kwh": [0.1]}
    ).write_parquet(tmp_path / "tariffs.parquet")
    b = read_bundle(tmp_path)
    assert b["telemetry"]["ts"].to_list() == [utc(2026, 10, 1, 0, 0)]
    assert b["telemetry"]["util_pct"].to_list() == [50.0]
    assert rejected_rows(b, "telemetry") == [(2, "power_w is NaN; util_pct 101 outside 0..100")]
    assert b["quotas"]["gpus"].to_list() == [4.0]
    assert [r for r, _ in rejected_rows(b, "tariffs")] == [1]
    assert "start timestamp without offset" in rejected_rows(b, "tariffs")[0][1]
    b2 = read_bundle(tmp_path, Config.model_validate({"period": {"source_timezone": "UTC"}}))
    assert b2["tariffs"]["start"].to_list() == [utc(2026, 10, 1)]


# --------------------------------------------------------------------------- time


def test_epoch_seconds_and_iso_offsets_agree(tmp_path: Path) -> None:
    epoch = int(utc(2026, 10, 1).timestamp())
    allocations(
        tmp_path,
        [
            ["a1", "g1", "2026-10-01T00:00:00Z", "2026-10-01T01:00:00Z", "o"],
            ["a2", "g1", str(epoch), f"{epoch + 3600}.0", "o"],
            ["a3", "g1", "2026-10-01T02:00:00+02:00", "2026-10-01 01:00Z", "o"],
            ["a4", "g1", "2026-09-30T19:00:00-05:00", "2026-10-01T01:00:00.000000+0000", "o"],
            ["a5", "g1", "1790812800000", "yesterday", "o"],
        ],
    )
    b = read_bundle(tmp_path)
    frame = b["allocations"]
    assert frame["allocation_id"].to_list() == ["a1", "a2", "a3", "a4"]
    assert set(frame["start"].to_list()) == {utc(2026, 10, 1)}
    assert set(frame["end"].to_list()) == {utc(2026, 10, 1, 1)}
    assert rejected_rows(b, "allocations") == [
        (
            5,
            "start '1790812800000' is not a timestamp (epoch seconds expected); "
            "end is not a timestamp: 'yesterday'",
        )
    ]


def test_epoch_numbers_in_json(tmp_path: Path) -> None:
    epoch = int(utc(2026, 10, 1).timestamp())
    write_jsonl(
        tmp_path,
        "allocations.jsonl",
        [
            {"allocation_id": "a1", "gpu_id": "g1", "start": epoch, "end": epoch + 1800.5, "owner": "o"},
            {"allocation_id": 2, "gpu_id": "g1", "start": epoch, "end": epoch + 60, "owner": "o", "share": 0.5},
        ],
    )
    b = read_bundle(tmp_path)
    assert b.rejected.height == 0
    assert b["allocations"]["allocation_id"].to_list() == ["a1", "2"]
    assert b["allocations"]["end"].to_list() == [
        datetime(2026, 10, 1, 0, 30, 0, 500000, tzinfo=UTC),
        utc(2026, 10, 1, 0, 1),
    ]
    assert b["allocations"]["share"].to_list() == [1.0, 0.5]


def test_offset_less_timestamps_and_source_timezone(tmp_path: Path) -> None:
    allocations(
        tmp_path,
        [
            ["a1", "g1", "2026-10-01T00:00:00Z", "2026-10-01T01:00:00Z", "o"],
            ["a2", "g1", "2026-10-01T02:00:00", "2026-10-01T03:00:00", "o"],
            ["a3", "g1", "2026-10-25T01:00:00", "2026-10-25T02:30:00", "o"],  # 02:30 happens twice
            ["a4", "g1", "2026-03-29T02:30:00", "2026-03-29T04:00:00", "o"],  # 02:30 never happens
        ],
    )
    strict = read_bundle(tmp_path)
    assert alloc_ids(strict) == ["a1"]
    reasons = rejected_rows(strict, "allocations")
    assert [r for r, _ in reasons] == [2, 3, 4]
    assert reasons[0][1] == (
        "start timestamp without offset '2026-10-01T02:00:00' (add Z or +hh:mm, or set period.source_timezone); "
        "end timestamp without offset '2026-10-01T03:00:00' (add Z or +hh:mm, or set period.source_timezone)"
    )

    berlin = read_bundle(tmp_path, Config.model_validate({"period": {"source_timezone": "Europe/Berlin"}}))
    assert alloc_ids(berlin) == ["a1", "a2"]
    a2 = berlin["allocations"].row(1, named=True)
    assert (a2["start"], a2["end"]) == (utc(2026, 10, 1, 0), utc(2026, 10, 1, 1))  # CEST = UTC+2
    assert rejected_rows(berlin, "allocations") == [
        (3, "end '2026-10-25T02:30:00' is ambiguous in Europe/Berlin (DST change; give an offset)"),
        (4, "start '2026-03-29T02:30:00' does not exist in Europe/Berlin (DST gap; give an offset)"),
    ]


# --------------------------------------------------------------------------- CSV text


def test_bom_header(tmp_path: Path) -> None:
    text = ALLOC_HEADER + "\n" + ",".join(ALLOC_ROWS[0]) + "\n"
    (tmp_path / "allocations.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a1"]
    assert b.rejected.height == 0


def test_header_and_values_are_stripped(tmp_path: Path) -> None:
    allocations(
        tmp_path,
        [[" a1 ", " g1", " 2026-10-01T00:00:00Z ", "2026-10-01T01:00:00Z", "  "]] + [ALLOC_ROWS[1]],
        header=" allocation_id , gpu_id,start,end ,owner",
    )
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a2"]
    assert rejected_rows(b, "allocations") == [(1, "missing required owner")]


def test_quoted_newline_keeps_row_numbers(tmp_path: Path) -> None:
    header = ALLOC_HEADER + ",model"
    (tmp_path / "allocations.csv").write_text(
        header
        + "\n"
        + 'a1,g1,2026-10-01T00:00:00Z,2026-10-01T01:00:00Z,o,"two\nlines"\n'
        + "a2,g1,2026-10-01T00:00:00Z,bad,o,m\n"
        + "a3,g1,2026-10-01T00:00:00Z,2026-10-01T01:00:00Z,o,m\n",
        encoding="utf-8",
    )
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a1", "a3"]
    assert b["allocations"]["model"][0] == "two\nlines"
    assert rejected_rows(b, "allocations") == [(2, "end is not a timestamp: 'bad'")]


def test_empty_and_header_only_files(tmp_path: Path) -> None:
    allocations(tmp_path)
    (tmp_path / "telemetry.csv").write_bytes(b"")
    (tmp_path / "requests.jsonl").write_text("\n\n", encoding="utf-8")
    (tmp_path / "costs.csv").write_text("cost_id,category,amount,start,end\n", encoding="utf-8")
    b = read_bundle(tmp_path)
    assert b.present == frozenset({"allocations", "telemetry", "requests", "costs"})
    for table in ("telemetry", "requests", "costs"):
        assert b[table].height == 0
        assert list(b[table].schema.items())[: len(schema(table))] == list(schema(table).items())
    assert ("empty file", "telemetry.csv") in b.notes
    assert ("empty file", "requests.jsonl") in b.notes
    assert ("empty file", "costs.csv") in b.notes
    assert alloc_ids(b) == ["a1", "a2"]


def test_gzip_named_csv_is_an_error(tmp_path: Path) -> None:
    text = (ALLOC_HEADER + "\n" + ",".join(ALLOC_ROWS[0]) + "\n").encode()
    (tmp_path / "allocations.csv").write_bytes(gzip.compress(text))
    with pytest.raises(BundleError, match=r"allocations\.csv.*gzip"):
        read_bundle(tmp_path)


def test_binary_garbage_is_an_error(tmp_path: Path) -> None:
    allocations(tmp_path)
    (tmp_path / "telemetry.csv").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(BundleError, match=r"telemetry\.csv"):
        read_bundle(tmp_path)


def test_duplicate_header_is_an_error(tmp_path: Path) -> None:
    allocations(tmp_path, header=ALLOC_HEADER + ",owner", rows=[ALLOC_ROWS[0] + ["x"]])
    with pytest.raises(BundleError, match="owner appears more than once"):
        read_bundle(tmp_path)


# --------------------------------------------------------------------------- JSONL


def test_jsonl_broken_line_rejected_others_count(tmp_path: Path) -> None:
    allocations(tmp_path)
    good = {"request_id": "r1", "ts": "2026-10-01T00:00:00Z", "owner": "k", "model": "m",
            "input_tokens": 10, "output_tokens": 5}
    write_jsonl(
        tmp_path,
        "requests.jsonl",
        [
            good,
            "",
            {**good, "request_id": "r2"},
            '{"request_id": "r3", "ts": ',
            "[1, 2]",
            {**good, "request_id": "r4", "output_tokens": "lots"},
            {**good, "request_id": "r5", "status": "timeout", "extra": {"a": 1}},
        ],
    )
    b = read_bundle(tmp_path)
    assert b["requests"]["request_id"].to_list() == ["r1", "r2", "r5"]
    assert b["requests"]["status"].to_list() == ["ok", "ok", "timeout"]
    assert b["requests"]["extra"].to_list() == [None, None, '{"a": 1}']
    assert rejected_rows(b, "requests") == [
        (4, "line 4 is not valid JSON"),
        (5, "line 5 is not a JSON object"),
        (6, "output_tokens is not a number: 'lots'"),
    ]
    assert set(b.rejected["file"].to_list()) == {"requests.jsonl"}



def test_jsonl_blank_lines_keep_line_numbers(tmp_path: Path) -> None:
    records = _alloc_records()
    bad = {**records[1], "allocation_id": "a3", "end": records[1]["start"]}
    write_jsonl(tmp_path, "allocations.jsonl", [records[0], "", "   ", records[1], "", bad])
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a1", "a2"]
    assert [r for r, _ in rejected_rows(b, "allocations")] == [6]
    assert rejected_rows(b, "allocations")[0][1].startswith("zero-length interval")


# --------------------------------------------------------------------------- values


TEL_HEADER = "ts,gpu_id,util_pct,power_w,energy_j,mem_used_mib"


def test_telemetry_numbers(tmp_path: Path) -> None:
    allocations(tmp_path)
    t = "2026-10-01T00:00:0{}Z"
    write_csv(
        tmp_path,
        "telemetry.csv",
        TEL_HEADER,
        [
            [t.format(0), "g1", "50", "300", "1000", "2048"],
            [t.format(1), "g1", "NaN", "300", "", ""],
            [t.format(2), "g1", "inf", "", "", ""],
            [t.format(3), "g1", "-1", "", "", ""],
            [t.format(4), "g1", "130", "", "", ""],
            [t.format(5), "g1", "100", "-5", "-1", "-2"],
            [t.format(6), "g1", "0", "", "", ""],
            [t.format(7), "g1", "", "", "", ""],
            [t.format(8), "g1", "12%", "-inf", "", ""],
        ],
    )
    b = read_bundle(tmp_path)
    tel = b["telemetry"]
    assert tel["util_pct"].to_list() == [50.0, 0.0]
    assert tel["ts"].to_list() == [utc(2026, 10, 1, 0, 0, 0), utc(2026, 10, 1, 0, 0, 6)]
    assert rejected_rows(b, "telemetry") == [
        (2, "util_pct is NaN"),
        (3, "util_pct is infinite: 'inf'"),
        (4, "util_pct -1 outside 0..100"),
        (5, "util_pct 130 outside 0..100"),
        (6, "power_w -5 is negative; energy_j -1 is negative; mem_used_mib -2 is negative"),
        (8, "missing required util_pct"),
        (9, "util_pct is not a number: '12%'; power_w is infinite: '-inf'"),
    ]


REQ_HEADER = "request_id,ts,owner,model,input_tokens,output_tokens,cached_input_tokens,requests,end"


def test_tokens_must_be_integral_and_non_negative(tmp_path: Path) -> None:
    allocations(tmp_path)
    ts = "2026-10-01T00:00:00Z"
    write_csv(
        tmp_path,
        "requests.csv",
        REQ_HEADER,
        [
            ["r1", ts, "k", "m", "10", "12.0", "", "", ""],
            ["r2", ts, "k", "m", "10", "12.5", "", "", ""],
            ["r3", ts, "k", "m", "-3", "4", "", "", ""],
            ["r4", ts, "k", "m", "1e3", "4", "2", "5", "2026-10-01T01:00:00Z"],
            ["r5", ts, "k", "m", "1", "4", "", "0", ts],
        ],
    )
    b = read_bundle(tmp_path)
    req = b["requests"]
    assert req["request_id"].to_list() == ["r1", "r4"]
    assert req["output_tokens"].to_list() == [12, 4]
    assert req["input_tokens"].to_list() == [10, 1000]
    assert req["cached_input_tokens"].to_list() == [0, 2]
    assert req["requests"].to_list() == [1, 5]
    assert req.schema["input_tokens"] == pl.Int64
    assert rejected_rows(b, "requests") == [
        (2, "output_tokens is not an integer: '12.5'"),
        (3, "input_tokens -3 is negative"),
        (5, "requests 0 is below 1; zero-length interval (ts = end = 2026-10-01T00:00:00Z)"),
    ]


COST_HEADER = "cost_id,category,amount,currency,start,end,driver"
SPAN = ["2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"]


def test_unknown_category_and_driver(tmp_path: Path) -> None:
    allocations(tmp_path)
    write_csv(
        tmp_path,
        "costs.csv",
        COST_HEADER,
        [
            ["c1", "power", "100", "", *SPAN, ""],
            ["c2", "electricity", "100", "", *SPAN, ""],
            ["c3", "software", "100", "USD", *SPAN, "headcount"],
            ["c4", "software", "-1", "USD", *SPAN, "even"],
        ],
    )
    b = read_bundle(tmp_path)
    assert b["costs"]["cost_id"].to_list() == ["c1"]
    assert b["costs"]["currency"].to_list() == ["USD"]
    reasons = rejected_rows(b, "costs")
    assert [r for r, _ in reasons] == [2, 3, 4]
    assert reasons[0][1].startswith("unknown category 'electricity' (expected one of gpu_rental,")
    assert reasons[1][1].startswith("unknown driver 'headcount' (expected one of capacity_hours,")
    assert reasons[2][1] == "amount -1 is negative"


def test_currency_mix_rejected_then_converted(tmp_path: Path) -> None:
    allocations(tmp_path)
    write_csv(
        tmp_path,
        "costs.csv",
        COST_HEADER,
        [
            ["c1", "power", "100", "USD", *SPAN, ""],
            ["c2", "power", "200", "EUR", *SPAN, ""],
            ["c3", "power", "50", "", *SPAN, ""],
            ["c4", "power", "10", "eur", *SPAN, ""],
        ],
    )
    b = read_bundle(tmp_path)
    assert b["costs"]["cost_id"].to_list() == ["c1", "c3"]
    assert rejected_rows(b, "costs") == [
        (2, "currency EUR differs from USD and no rate is configured"),
        (4, "currency EUR differs from USD and no rate is configured"),
    ]

    b = read_bundle(tmp_path, Config.model_validate({"currency_rates": {"EUR": 1.1}}))
    costs = b["costs"]
    assert b.rejected.height == 0
    assert costs["cost_id"].to_list() == ["c1", "c2", "c3", "c4"]
    assert costs["amount"].to_list() == pytest.approx([100.0, 220.0, 50.0, 11.0])
    assert costs["currency"].to_list() == ["USD"] * 4
    assert costs["original_amount"].to_list() == [100.0, 200.0, 50.0, 10.0]
    assert costs["original_currency"].to_list() == ["USD", "EUR", "USD", "EUR"]
    assert ("currency converted", "costs: 2 rows converted from EUR to USD") in b.notes


def test_allocation_rules(tmp_path: Path) -> None:
    s, e = "2026-10-01T00:00:00Z", "2026-10-01T01:00:00Z"
    write_csv(
        tmp_path,
        "allocations.csv",
        ALLOC_HEADER + ",share,workload,requested_gpus",
        [
            ["a1", "g1", s, e, "o", "0.5", "training", "8"],
            ["a2", "g1", e, s, "o", "", "", ""],
            ["a3", "g1", s, s, "o", "", "", ""],
            ["a4", "g1", s, e, "o", "0", "", ""],
            ["a5", "g1", s, e, "o", "1.5", "gaming", "-1"],
            ["", "g1", s, e, "o", "", "", ""],
        ],
    )
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a1"]
    assert b["allocations"]["requested_gpus"].to_list() == [8.0]
    reasons = rejected_rows(b, "allocations")
    assert reasons[:3] == [
        (2, f"end before start (start {e}, end {s})"),
        (3, f"zero-length interval (start = end = {s})"),
        (4, "share 0 outside (0, 1]"),
    ]
    assert reasons[3][0] == 5
    assert reasons[3][1].startswith("share 1.5 outside (0, 1]; unknown workload 'gaming' (expected one of")
    assert reasons[3][1].endswith("; requested_gpus -1 is negative")
    assert reasons[4] == (6, "missing required allocation_id")


def test_events_need_scope_and_known_kind(tmp_path: Path) -> None:
    allocations(tmp_path)
    write_csv(
        tmp_path,
        "events.csv",
        "start,end,kind,gpu_id,node,pool",
        [
            [*SPAN, "maintenance", "", "", "p1"],
            [*SPAN, "maintenance", "", "", ""],
            [*SPAN, "outage", "g1", "", ""],
        ],
    )
    b = read_bundle(tmp_path)
    assert b["events"]["pool"].to_list() == ["p1"]
    reasons = rejected_rows(b, "events")
    assert reasons[0] == (2, "event needs a gpu_id, node or pool scope")
    assert reasons[1][0] == 3 and reasons[1][1].startswith("unknown kind 'outage'")


def test_queue_defaults_and_order(tmp_path: Path) -> None:
    allocations(tmp_path)
    write_csv(
        tmp_path,
        "queue.csv",
        "job_id,pool,gpus,submit,start,reason",
        [
            ["j1", "p", "4", "2026-10-01T00:00:00Z", "", ""],
            ["j2", "p", "0", "2026-10-01T00:00:00Z", "", "quota"],
            ["j3", "p", "2", "2026-10-01T01:00:00Z", "2026-10-01T00:00:00Z", "quota"],
        ],
    )
    b = read_bundle(tmp_path)
    assert b["queue"]["job_id"].to_list() == ["j1"]
    assert b["queue"]["reason"].to_list() == ["other"]
    assert rejected_rows(b, "queue") == [
        (2, "gpus 0 must be above 0"),
        (3, "start before submit (submit 2026-10-01T01:00:00Z, start 2026-10-01T00:00:00Z)"),
    ]


# --------------------------------------------------------------------------- duplicates


def test_identical_duplicates_counted_once(tmp_path: Path) -> None:
    epoch = str(int(utc(2026, 10, 1).timestamp()))
    row = ALLOC_ROWS[0]
    same_time_other_spelling = ["a1", "g1", epoch, row[3], "team-a"]
    allocations(tmp_path, [row, ALLOC_ROWS[1], row, same_time_other_spelling, row])
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a1", "a2"]
    assert b.rejected.height == 0
    assert ("duplicate rows", "allocations: 3 identical duplicate rows counted once") in b.notes


def test_conflicting_duplicates_all_rejected(tmp_path: Path) -> None:
    row = ALLOC_ROWS[0]
    conflict = ["a1", "g9", *row[2:]]
    allocations(tmp_path, [row, ALLOC_ROWS[1], row, conflict])
    b = read_bundle(tmp_path)
    assert alloc_ids(b) == ["a2"]
    reason = "conflicting duplicate allocation_id a1 (rows 1, 3, 4)"
    assert rejected_rows(b, "allocations") == [(1, reason), (3, reason), (4, reason)]


def test_conflicting_duplicates_on_composite_key(tmp_path: Path) -> None:
    allocations(tmp_path)
    write_csv(
        tmp_path,
        "telemetry.csv",
        "ts,gpu_id,util_pct",
        [
            ["2026-10-01T00:00:00Z", "g1", "10"],
            ["2026-10-01T00:00:00Z", "g1", "20"],
            ["2026-10-01T00:00:00Z", "g2", "20"],
        ],
    )
    b = read_bundle(tmp_path)
    assert b["telemetry"]["gpu_id"].to_list() == ["g2"]
    reason = "conflicting duplicate gpu_id g1, ts 2026-10-01T00:00:00Z (rows 1, 2)"
    assert rejected_rows(b, "telemetry") == [(1, reason), (2, reason)]


# --------------------------------------------------------------------------- bundle errors


def test_missing_required_column_is_an_error(tmp_path: Path) -> None:
    allocations(tmp_path, header="allocation_id,gpu_id,start,end", rows=[r[:4] for r in ALLOC_ROWS])
    with pytest.raises(BundleError, match=r"allocations\.csv: required column owner missing"):
        read_bundle(tmp_path)


def test_missing_allocations_is_an_error(tmp_path: Path) -> None:
    write_csv(tmp_path, "telemetry.csv", TEL_HEADER, [])
    with pytest.raises(BundleError, match="no allocations file") as err:
        read_bundle(tmp_path)
    assert str(tmp_path) in str(err.value)
    missing = tmp_path / "nowhere"
    with pytest.raises(BundleError, match="does not exist") as err:
        read_bundle(missing)
    assert str(missing) in str(err.value)


def test_two_files_for_one_table_is_an_error(tmp_path: Path) -> None:
    allocations(tmp_path)
    pl.DataFrame(_alloc_records()).write_parquet(tmp_path / "allocations.parquet")
    with pytest.raises(BundleError, match=r"allocations\.csv, allocations\.parquet"):
        read_bundle(tmp_path)


def test_unknown_files_noted_and_config_ignored(tmp_path: Path) -> None:
    allocations(tmp_path)
    (tmp_path / "README.md").write_text("hi", encoding="utf-8")
    (tmp_path / "ailedger.toml").write_text("[period]\n", encoding="utf-8")
    b = read_bundle(tmp_path)
    assert b.notes == [("unknown file", "README.md")]


# --------------------------------------------------------------------------- public validate_frame


def test_validate_frame_on_strings() -> None:
    raw = pl.DataFrame(
        {
            "request_id": ["r1", "r2"],
            "ts": ["2026-10-01T00:00:00Z", "2026-10-01T00:00:00"],
            "owner": ["k", "k"],
            "model": ["m", "m"],
            "input_tokens": ["1", "2"],
            "output_tokens": ["3", "4"],
            "team": ["x", "y"],
        }
    )
    notes: list[tuple[str, str]] = []
    valid, rejected = validate_frame("requests", raw, Config(), "gateway-export", notes=notes)
    assert valid["request_id"].to_list() == ["r1"]
    assert valid.columns == [*schema("requests"), "team"]
    assert ROW not in valid.columns
    assert rejected.columns == ["table", "row", "reason", "file"]
    assert rejected.rows() == [
        (
            "requests",
            2,
            "ts timestamp without offset '2026-10-01T00:00:00' (add Z or +hh:mm, or set period.source_timezone)",
            "gateway-export",
        )
    ]
    assert notes == []


def test_validate_frame_typed_and_null_columns() -> None:
    """Importers may hand over typed frames: nulls, bools and numbers go through the same checks."""
    raw = pl.DataFrame(
        {
            "ts": [utc(2026, 10, 1), utc(2026, 10, 1, 0, 1), None],
            "gpu_id": [1, 2, 3],
            "util_pct": [10, 200, 5],
            "power_w": pl.Series([None, None, None], dtype=pl.Null),
            "mem_used_mib": [None, False, None],
        }
    )
    valid, rejected = validate_frame("telemetry", raw, None, "nvml")
    assert valid["gpu_id"].to_list() == ["1"]
    assert valid["power_w"].to_list() == [None]
    assert rejected.select("row", "reason").rows() == [
        (2, "mem_used_mib is not a number: 'false'; util_pct 200 outside 0..100"),
        (3, "missing required ts"),
    ]


def test_reserved_row_column_is_an_error(tmp_path: Path) -> None:
    pl.DataFrame({**{k: [v] for k, v in _alloc_records()[0].items()}, ROW: [7]}).write_parquet(
        tmp_path / "allocations.parquet"
    )
    with pytest.raises(BundleError, match="reserved"):
        read_bundle(tmp_path)


# --------------------------------------------------------------------------- property: formats agree

_TS_TEXT = st.sampled_from(
    ["2026-10-01T00:00:00Z", "2026-10-01T02:00:00+02:00", "1790812800", "1790812800.25",
     "2026-10-01T00:00:00", "2026-10-01 00:00", "not-a-time", ""]
)
_UTIL_TEXT = st.one_of(
    st.sampled_from(["NaN", "inf", "-inf", "", "abc", "100", "0", "100.0001"]),
    st.floats(min_value=-50, max_value=150, allow_nan=False).map(repr),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_TS_TEXT, st.sampled_from(["g1", "g2", " g1 "]), _UTIL_TEXT), max_size=12))
def test_csv_jsonl_parquet_agree(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str, str]]) -> None:
    """The shared pipeline: the same text in any format gives the same rows and rejections."""
    results = []
    records = [{"ts": t or None, "gpu_id": g, "util_pct": u or None} for t, g, u in rows]
    for fmt in ("csv", "jsonl", "parquet"):
        folder = tmp_path_factory.mktemp(fmt)
        allocations(folder)
        frame = pl.DataFrame(records, schema={"ts": pl.String, "gpu_id": pl.String, "util_pct": pl.String})
        if fmt == "csv":
            frame.write_csv(folder / "telemetry.csv")
        elif fmt == "jsonl":
            write_jsonl(folder, "telemetry.jsonl", records) if records else (folder / "telemetry.jsonl").write_text("")
        else:
            frame.write_parquet(folder / "telemetry.parquet")
        b = read_bundle(folder)
        results.append((b["telemetry"], b.rejected.drop("file")))
        # every input row is either kept, rejected, or an identical duplicate counted once
        dropped = sum(int(d.split()[1]) for w, d in b.notes if w == "duplicate rows")
        assert b["telemetry"].height + b.rejected.height + dropped == len(rows)
    for frame, rejected in results[1:]:
        assert_frame_equal(frame, results[0][0])
        assert_frame_equal(rejected, results[0][1])
