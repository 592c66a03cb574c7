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


# Issue 17, item 2: infinite and absurd values computed silently wrong (NaN reconciliation,
# null tenant costs, a bare NaN in --json, an OverflowError for a huge sample gap). Every
# number now has a finite, sane range; the error names the key.
@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"energy": {"pue": float("inf")}}, "energy.pue: Input should be a finite number"),
        ({"energy": {"server_overhead": float("inf")}}, "energy.server_overhead: Input should be a finite number"),
        ({"energy": {"pue": 50.0}}, "energy.pue: Input should be less than or equal to 5"),
        ({"energy": {"flat_price_per_kwh": float("inf")}}, "energy.flat_price_per_kwh: Input should be a finite"),
        ({"energy": {"flat_price_per_kwh": 1e308}}, "energy.flat_price_per_kwh: Input should be less than or equal"),
        ({"activity": {"max_sample_gap_s": 1e12}}, "activity.max_sample_gap_s: Input should be less than or equal"),
        ({"activity": {"max_sample_gap_s": float("inf")}}, "activity.max_sample_gap_s: Input should be a finite"),
        ({"activity": {"threshold_pct": float("nan")}}, "activity.threshold_pct: Input should be a finite"),
        ({"allocation": {"shares": {"A": float("inf")}}}, "allocation.shares.A: Input should be a finite number"),
        ({"allocation": {"shares": {"A": 0.0, "B": 0.0}}}, "every share is 0"),
        ({"allocation": {"token_weights": {"output": float("inf")}}},
         "allocation.token_weights.output: Input should be a finite number"),
        ({"allocation": {"token_weights": {"input": 0, "cached_input": 0, "output": 0}}},
         "allocation.token_weights: Value error, all three weights are 0"),
        ({"slo": {"ttft_ms": float("inf")}}, "slo.ttft_ms: Input should be a finite number"),
        ({"currency_rates": {"EUR": float("inf")}}, "currency_rates.EUR: Input should be a finite number"),
        ({"currency_rates": {"EUR": 0.0}}, "rate of 'EUR' must be above 0"),
        ({"validation": {"overlaps": "sum"}}, "validation.overlaps"),
    ],
)
def test_numbers_have_finite_sane_ranges(data, fragment):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert fragment in str(err.value)


def test_the_range_edges_are_accepted():
    c = parse_config({"energy": {"pue": 5.0, "server_overhead": 1.0, "flat_price_per_kwh": 10_000.0},
                      "activity": {"max_sample_gap_s": 86_400}, "allocation": {"token_weights": {"input": 0.0,
                      "cached_input": 0.0, "output": 1.0}, "shares": {"A": 0.0, "B": 1.0}}})
    assert c.energy.pue == 5.0 and c.activity.max_sample_gap_s == 86_400
    assert c.validation.overlaps == "reject"  # the default: overlapping rates are rejected


def test_a_byte_order_mark_is_said_plainly(tmp_path):
    """Issue 17, item 10: a config saved with a UTF-8 BOM (Notepad) gave tomllib's "Invalid
    statement (at line 1, column 1)"; now the message says what it is and what to do."""
    p = tmp_path / "ailedger.toml"
    p.write_bytes(b"\xef\xbb\xbf[energy]\npue = 1.2\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value) == (f"{p}: starts with a UTF-8 byte-order mark (BOM), which TOML does not allow: "
                              "save the file as UTF-8 without BOM")
