"""The forecast model (cost_engine/forecast.py) on series whose answer is computed by hand."""

from __future__ import annotations

from datetime import date, timedelta

import polars as pl
import pytest

from cost_engine.forecast import forecast, t_quantile

D0 = date(2026, 10, 1)  # a Thursday


def days(n: int, first: date = D0) -> list[date]:
    return [first + timedelta(days=i) for i in range(n)]


def history(costs: list[float], hours: list[float] | None = None, first: date = D0) -> pl.DataFrame:
    return pl.DataFrame({"day": days(len(costs), first), "cost": costs, "hours": hours or [24.0] * len(costs)},
                        schema={"day": pl.Date, "cost": pl.Float64, "hours": pl.Float64})


def future(first: date, n: int, hours: list[float] | None = None) -> pl.DataFrame:
    return pl.DataFrame({"day": days(n, first), "hours": hours or [24.0] * n},
                        schema={"day": pl.Date, "hours": pl.Float64})


def test_constant_series_forecasts_itself_with_a_zero_width_interval():
    """30 days at $250 (level + damped trend + weekday terms all fitted): the next 10 days cost
    10 x 250 = $2,500 exactly; no residual, no drift, so every bound is $2,500 too."""
    f = forecast(history([250.0] * 30), future(D0 + timedelta(days=30), 10))
    assert f.model == "weekday_trend" and f.history_days == 30
    assert f.point == 2500.0
    assert (f.lo80, f.hi80, f.lo95, f.hi95) == (2500.0, 2500.0, 2500.0, 2500.0)
    # day by day: 250, 500, ..., 2,500, bands on the line
    assert f.path["cum"].to_list() == [250.0 * k for k in range(1, 11)]
    assert f.path["cum_hi95"].to_list() == f.path["cum"].to_list()


def test_short_constant_history_uses_the_mean_model():
    """3 days at $240: model "mean" (under 7 days), 28 days ahead = 6,720; zero width (dof 3 - 1 = 2)."""
    f = forecast(history([240.0] * 3), future(D0 + timedelta(days=3), 28))
    assert f.model == "mean" and f.point == 6720.0 and f.lo80 == 6720.0 and f.hi95 == 6720.0


def test_partial_days_count_by_their_hours():
    """A first day with 12 h covered at $50 is a rate of $100 a day; 8 full days at $100 follow.
    Ahead: 3 full days and a 6-hour remainder = 3 x 100 + 100 x 6 / 24 = $325, zero width."""
    f = forecast(history([50.0] + [100.0] * 8, [12.0] + [24.0] * 8),
                 future(D0 + timedelta(days=9), 4, [24.0, 24.0, 24.0, 6.0]))
    assert f.point == pytest.approx(325.0, abs=1e-9)
    assert f.hi80 == pytest.approx(325.0, abs=1e-9) and f.lo95 == pytest.approx(325.0, abs=1e-9)


def test_weekday_effects_are_shrunk_means():
    """Three weeks: $100 on weekdays (15 days), $40 at weekends (6). Each weekday is seen 3 times,
    so its effect keeps 3 / (3 + 1) of its mean residual. Level L solves
    21 L = 15 (100 - 0.75 (100 - L)) + 6 (40 - 0.75 (40 - L))  ->  5.25 L = 435  ->  L = 82.857...
    weekday: L + 0.75 (100 - L) = 95.714...; weekend day: L + 0.75 (40 - L) = 51.25.
    21 days are under the four weeks a trend needs. Next Monday + Saturday: 146.964..."""
    wd = [100.0 if d.weekday() < 5 else 40.0 for d in days(21)]
    f = forecast(history(wd), future(date(2026, 10, 26), 1).vstack(future(date(2026, 10, 31), 1)))
    assert f.model == "weekday"
    level = 435 / 5.25
    monday, saturday = f.path["cost"].to_list()
    assert monday == pytest.approx(level + 0.75 * (100 - level), rel=1e-9)
    assert saturday == pytest.approx(level + 0.75 * (40 - level), rel=1e-9)
    assert f.point == pytest.approx(monday + saturday, rel=1e-12)
    assert 0 < f.lo80 < f.point < f.hi80 and f.lo95 < f.lo80 and f.hi95 > f.hi80


def test_no_history_means_no_forecast_and_one_day_no_interval():
    none = forecast(history([]), future(D0, 3))
    assert none.model == "none" and none.point is None and none.hi80 is None
    one = forecast(history([120.0]), future(D0 + timedelta(days=1), 2))
    assert one.point == 240.0 and one.lo80 is None and one.hi95 is None  # spread unknown, not zero


def test_nothing_left_to_forecast_is_zero():
    f = forecast(history([10.0, 20.0]), future(D0, 0))
    assert f.point == 0.0 and f.hi95 == 0.0 and f.path.height == 0


def test_costs_are_never_forecast_negative():
    """A steep fall extrapolates below zero; the forecast floors each day at 0."""
    f = forecast(history([float(x) for x in range(600, 0, -20)]), future(D0 + timedelta(days=30), 60))
    assert min(f.path["cost"].to_list()) >= 0.0 and f.lo95 >= 0.0


@pytest.mark.parametrize(("p", "dof", "table"), [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 10, 2.228), (0.975, 30, 2.042),
    (0.9, 1, 3.078), (0.9, 2, 1.886), (0.9, 3, 1.638), (0.9, 10, 1.372), (0.9, 30, 1.310),
])
def test_t_quantiles_match_the_table(p, dof, table):
    """Student-t quantiles against a printed table (3 decimals)."""
    assert t_quantile(p, dof) == pytest.approx(table, abs=6e-3)
