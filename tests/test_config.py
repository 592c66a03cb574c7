"""Config: contract defaults, errors that name the key, presets, and a TOML round trip."""

from __future__ import annotations

import tomllib

import pytest

from cost_engine.config import BOUNDARY_PRESETS, ConfigError, dump_config, load_config, parse_config


def test_defaults_are_the_contracts():
    c = parse_config({})
    assert (c.period.timezone, c.period.currency) == ("UTC", "USD")
    assert c.boundary.name == "fully_loaded" and len(c.boundary.included) == 15
    assert (c.activity.mode, c.activity.threshold_pct, c.activity.max_sample_gap_s) == ("threshold", 5.0, 300)
    assert (c.energy.server_overhead, c.energy.pue, c.energy.flat_price_per_kwh) == (1.3, 1.2, 0.12)
    assert (c.allocation.idle, c.allocation.inference_recharge, c.allocation.token_split) == (
        "separate", "tokens", "phase_time")
    w = c.allocation.token_weights
    assert (w.input, w.cached_input, w.output) == (1.0, 0.1, 4.0)
    assert (c.slo.ttft_ms, c.slo.latency_ms) == (2000, 30000)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"energy": {"peu": 1.2}}, "energy.peu: unknown key"),
        ({"colour": 1}, "colour: unknown key"),
        ({"activity": {"mode": "fast"}}, "activity.mode"),
        ({"energy": {"pue": 0.5}}, "energy.pue"),
        ({"boundary": {"name": "custom"}}, "categories"),
        ({"boundary": {"name": "custom", "categories": ["gpu", "power"]}}, "unknown categories ['gpu']"),
        ({"allocation": {"drivers": {"software": "magic"}}}, "unknown driver 'magic'"),
        ({"period": {"timezone": "Mars/Olympus"}}, "unknown time zone"),
    ],
)
def test_bad_values_name_the_key(data, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_config(data)


def test_presets():
    assert BOUNDARY_PRESETS["narrow"] == ("depreciation", "power")
    assert parse_config({"boundary": {"name": "rental"}}).boundary.included == ("gpu_rental",)


def test_toml_round_trip(tmp_path):
    text = """
currency_rates = { EUR = 1.08 }
[period]
start = 2026-10-01T00:00:00Z
end = 2026-11-01T00:00:00Z
timezone = "Europe/Berlin"
[boundary]
name = "custom"
categories = ["depreciation", "power"]
[allocation]
idle = "proportional"
drivers = { software = "even" }
shares = { "tenant-a" = 0.6, "tenant-b" = 0.4 }
"""
    p = tmp_path / "a.toml"
    p.write_text(text)
    c = load_config(p)
    again = tmp_path / "b.toml"
    again.write_text(dump_config(c))
    tomllib.loads(again.read_text())  # valid TOML
    assert load_config(again) == c


def test_unreadable_file_names_it(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("[period\n")
    with pytest.raises(ConfigError, match="x.toml"):
        load_config(p)
