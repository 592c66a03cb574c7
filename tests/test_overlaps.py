"""Overlapping rates and tariffs never charge twice (issue 17, item 3; the bundle-file cases,
quotas included, are in tests/corpus: overlapping_rates, overlapping_rates_superseded,
overlapping_tariffs, quotas_twice).

The red team's case on the sample fleet: the a100-infer rental written as a price change in two
open-ended rows, $1.6 from Oct 5 and $2.0 from Oct 8. The pool has 8 whole cards in service all
week (Oct 5-12, 168 h). On main both rows charged: 1.6 x 8 x 168 = 2,150.40 plus 2.0 x 8 x 96 =
1,536.00 on top of the 7,617.58 of everything else = 11,303.98. Read as a price history the
rent is 1.6 x 8 x 72 = 921.60 plus 2.0 x 8 x 96 = 1,536.00: 10,075.18.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_engine import api, store
from cost_engine.bundle import read_bundle
from cost_engine.cli import main
from cost_engine.config import load_config
from cost_engine.report import build_report
from tests.dashboard_support import SAMPLE

OTHER_COSTS = 7617.58089653  # the sample's cost without its rate (9,767.98 - 2,150.40)
PRICE_CHANGE = ("pool,price_per_gpu_hour,category,start,end\n"
                "a100-infer,1.6,gpu_rental,2026-10-05T00:00:00Z,\n"
                "a100-infer,2.0,gpu_rental,2026-10-08T00:00:00Z,\n")
SUPERSEDE = '\n[validation]\noverlaps = "later_start_supersedes"\n'


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    folder = tmp_path / "fw"
    shutil.copytree(SAMPLE, folder)
    (folder / "rates.csv").write_text(PRICE_CHANGE, encoding="utf-8")
    return folder


def test_overlapping_rates_are_rejected_naming_each_other(fleet: Path) -> None:
    rep = build_report(api.run(fleet))
    rates = [r for r in rep["rejected"] if r["table"] == "rates"]
    assert [(r["row"], r["reason"].split(";")[0]) for r in rates] == [
        (1, "overlaps rates row 2 (pool a100-infer, gpu_rental, 2026-10-08T00:00:00Z .. open)"),
        (2, "overlaps rates row 1 (pool a100-infer, gpu_rental, 2026-10-05T00:00:00Z .. open)"),
    ]
    assert rep["totals"]["cost"] == pytest.approx(OTHER_COSTS)  # neither row charges
    assert abs(rep["reconciliation"]["difference"]) < 1e-6


def test_later_start_supersedes_when_asked(fleet: Path) -> None:
    (fleet / "ailedger.toml").write_text((SAMPLE / "ailedger.toml").read_text() + SUPERSEDE)
    rep = build_report(api.run(fleet))
    assert rep["totals"]["cost"] == pytest.approx(OTHER_COSTS + 921.6 + 1536.0)  # 10,075.18
    gap = next(g for g in rep["gaps"] if g["what"] == "overlap superseded")
    assert gap["detail"].startswith("rates of pool a100-infer, gpu_rental: the row starting 2026-10-05T00:00:00Z "
                                    "ends 2026-10-08T00:00:00Z, where the next one starts")
    assert not [r for r in rep["rejected"] if r["table"] == "rates"]


def _rates_bundle(root: Path, name: str, row: str) -> Path:
    folder = root / name
    shutil.copytree(SAMPLE, folder)
    (folder / "rates.csv").write_text("pool,price_per_gpu_hour,category,start,end\n" + row, encoding="utf-8")
    return folder


def test_rows_of_two_ingests_are_checked_together(tmp_path: Path) -> None:
    """Each bundle has one clean row; in the store they overlap. The report reads the store's
    rows together: both rejected (named by content: a stored row has no file row number)."""
    db = tmp_path / "ledger.duckdb"
    first = _rates_bundle(tmp_path, "b1", "a100-infer,1.6,gpu_rental,2026-10-05T00:00:00Z,\n")
    second = _rates_bundle(tmp_path, "b2", "a100-infer,2.0,gpu_rental,2026-10-08T00:00:00Z,\n")
    cfg = load_config(SAMPLE / "ailedger.toml")
    store.ingest(db, read_bundle(first, cfg))
    store.ingest(db, read_bundle(second, cfg))
    shutil.copyfile(SAMPLE / "ailedger.toml", db.with_suffix(".toml"))
    rep = build_report(api.run(db))
    rates = [r for r in rep["rejected"] if r["table"] == "rates"]
    assert [r["reason"].split(";")[0] for r in rates] == [
        "the rates row (pool a100-infer, gpu_rental, 2026-10-05T00:00:00Z .. open) overlaps the rates row "
        "(pool a100-infer, gpu_rental, 2026-10-08T00:00:00Z .. open)",
        "the rates row (pool a100-infer, gpu_rental, 2026-10-08T00:00:00Z .. open) overlaps the rates row "
        "(pool a100-infer, gpu_rental, 2026-10-05T00:00:00Z .. open)",
    ]
    assert all(r["row"] is None for r in rates)
    assert rep["totals"]["cost"] == pytest.approx(OTHER_COSTS)

    db.with_suffix(".toml").write_text((SAMPLE / "ailedger.toml").read_text() + SUPERSEDE)
    out = CliRunner().invoke(main, ["report", str(db), "--json"])
    assert out.exit_code == 0, out.output
    assert '"cost": 10075.18' in out.output
    assert "overlap superseded" in out.output
