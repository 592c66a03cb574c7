"""Scenario calibration from a report: each measured figure and where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from cost_engine.calibration import measured_from_report
from cost_engine.cli import main

ROOT = Path(__file__).resolve().parents[1]


def fake_report():
    """One week (168 h). Serving: 10 allocated GPU-hours, 8 active, 5 kWh GPU, 28,800 output tokens.
    throughput = 28,800 / (8 x 3600) = 1.0 token/s per card; utilization 8 / 10 = 0.8;
    avg power = 5 kWh x 1000 / 10 h = 500 W; price = $6 / 40 kWh facility = $0.15;
    monthly output = 28,800 x 730 / 168 = 125,142.857."""
    return {
        "period": {"start": "2026-10-05T00:00:00Z", "end": "2026-10-12T00:00:00Z"},
        "boundary": {"name": "fully_loaded"},
        "totals": {"energy_cost": 6.0, "energy_kwh_facility": 40.0, "cost_per_allocated_gpu_hour": 2.5,
                   "input_tokens": 1000, "cached_input_tokens": 0, "output_tokens": 28_800},
        "by_model": [{"model": "m", "allocated_gpu_hours": 10.0, "active_gpu_hours": 8.0, "energy_kwh_gpu": 5.0,
                      "output_tokens": 28_800}],
    }


def test_measured_figures_by_hand():
    measured, where = measured_from_report(fake_report())
    assert measured["output_tokens_per_s_per_gpu"] == pytest.approx(1.0)
    assert measured["utilization"] == pytest.approx(0.8)
    assert measured["avg_power_w"] == pytest.approx(500.0)
    assert measured["price_per_kwh"] == pytest.approx(0.15)
    assert measured["cost_per_gpu_hour"] == pytest.approx(2.5)
    assert measured["output_tokens_per_month"] == pytest.approx(28_800 * 730 / 168)
    assert "active GPU-hours" in where["output_tokens_per_s_per_gpu"]


def test_cli_calibrates_from_the_sample_fleet():
    res = CliRunner().invoke(main, ["scenario", str(ROOT / "sample_data" / "scenario.toml"), "--calibrate",
                                    str(ROOT / "sample_data" / "fleet-week"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert any(k.endswith(".utilization") for k in doc["calibrated"])
    assert all("<-" in line for line in doc["calibrated"].values())


def test_page_calibrates_from_the_open_source(monkeypatch):
    monkeypatch.setenv("AILEDGER_SOURCE", str(ROOT / "sample_data" / "fleet-week"))
    at = AppTest.from_file(str(ROOT / "pages" / "scenario.py"), default_timeout=120)
    at.run()
    at.toggle[0].set_value(True).run()
    assert not at.exception
    fields = at.dataframe[0].value["field"].to_list()
    assert "workload.output_tokens_per_month" in fields
