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


def test_constant_series_forecasts_itself_with_a_floored_interval():
    """30 days at $250 (level + damped trend + weekday terms all fitted): the next 10 days cost
    10 x 250 = $2,500 exactly. No residual, yet ten days ahead are not certain: the residual sd
    is floored at NOISE_FLOOR x level = 0.05 x 250 = 12.5 (issue 43, item 5). rho = drift = 0
    (no residual). Var(F) = 12.5^2 x [10 (noise) + 10^2 / 30 (level) + (sum x_f)^2 / S_xx
    (trend) + weekday terms]: t = 0..29, t_mean 14.5, S_xx = 30 (30^2 - 1) / 12 = 2,247.5; the
    days ahead h = 1..10 have x = 14.5 + 9 (1 - 0.9^h), sum x = 145 + 9 (10 - 5.861894) =
    182.24295, so the trend term is 182.24295^2 / 2,247.5 = 14.7775. Ahead Sat..Mon: Sat, Sun,
    Mon twice (each seen 4 times: 2^2 / 5), Tue, Wed once (1 / 5), Thu, Fri once (seen 5 times:
    1 / 6): 3.1333. Var = 156.25 x 31.2441 = 4,881.9, se 69.87; dof = 30 - (2 + 2 x 5/6 + 5 x
    4/5) = 22.333, t_0.9 = 1.3205: 80 % = 2,500 +- 92.27."""
    f = forecast(history([250.0] * 30), future(D0 + timedelta(days=30), 10))
    assert f.model == "weekday_trend" and f.history_days == 30
    assert f.point == 2500.0 and f.sigma == 12.5 and f.dof == pytest.approx(22 + 1 / 3)
    se = 12.5 * (10 + 100 / 30 + 182.24295**2 / 2247.5 + 3 * 0.8 + 2 * 0.2 + 2 / 6) ** 0.5
    assert f.hi80 == pytest.approx(2500 + t_quantile(0.9, 22 + 1 / 3) * se, rel=1e-8)
    assert f.hi80 == pytest.approx(2592.27, abs=0.01) and f.lo80 == pytest.approx(2407.73, abs=0.01)
    # day by day: 250, 500, ..., 2,500, bands around the line
    assert f.path["cum"].to_list() == [250.0 * k for k in range(1, 11)]
    assert all(hi > c for hi, c in zip(f.path["cum_hi95"], f.path["cum"]))


def test_three_identical_days_do_not_give_a_zero_width_month():
    """Issue 43 (5): 3 days at $240, 28 days ahead: model "mean" (under 7 days), 28 x 240 =
    6,720. It was a zero-width interval; now the residual sd is floored at 0.05 x 240 = 12, rho
    and drift 0 (too few pairs), dof 3 - 1 = 2: Var = 12^2 x (28 + 28^2 / 3) = 144 x 289.333 =
    41,664, se = 204.118; t_0.9(2) = 0.8 / sqrt(0.18) = 1.885618, t_0.975(2) = 0.95 /
    sqrt(0.04875) = 4.302653. 80 %: 6,720 -+ 384.89 = 6,335.11 .. 7,104.89; 95 %: -+ 878.25 =
    5,841.75 .. 7,598.25."""
    f = forecast(history([240.0] * 3), future(D0 + timedelta(days=3), 28))
    assert f.model == "mean" and f.point == 6720.0
    assert (f.lo80, f.hi80) == (pytest.approx(6335.11, abs=0.01), pytest.approx(7104.89, abs=0.01))
    assert (f.lo95, f.hi95) == (pytest.approx(5841.75, abs=0.01), pytest.approx(7598.25, abs=0.01))


def test_partial_days_count_by_their_hours():
    """A first day with 12 h covered at $50 is a rate of $100 a day; 8 full days at $100 follow.
    Ahead: 3 full days and a 6-hour remainder = 3 x 100 + 100 x 6 / 24 = $325. W = 8.5 days
    (weekday model). The spread: sd floored at 0.05 x 100 = 5; weekdays seen Thu 1.5 (0.5 +
    1), Fri 2, the rest 1: terms 1 + 1.5/2.5 + 2/3 + 5 x 1/2 = 4.7667, dof 3.7333. Ahead Sat,
    Sun, Mon (1 each, seen once: 1/2) and a quarter Tuesday (0.0625/2): Var = 25 x (3.25 +
    3.25^2 / 8.5 + 1.53125) = 25 x 6.0239, se 12.272; 80 % upper 325 + t_0.9(3.7333) x se
    = 344.08."""
    f = forecast(history([50.0] + [100.0] * 8, [12.0] + [24.0] * 8),
                 future(D0 + timedelta(days=9), 4, [24.0, 24.0, 24.0, 6.0]))
    assert f.point == pytest.approx(325.0, abs=1e-9)
    se = 5 * (3.25 + 3.25**2 / 8.5 + 1.53125) ** 0.5
    assert f.hi80 == pytest.approx(325 + t_quantile(0.9, 8.5 - (1 + 0.6 + 2 / 3 + 2.5)) * se, rel=1e-9)
    assert f.hi80 == pytest.approx(344.08, abs=0.01) and f.lo80 == pytest.approx(305.92, abs=0.01)


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


def test_an_owner_that_began_mid_history_is_forecast_from_its_first_cost():
    """Three days without cost, then two at $100 (a project that started on day 4): the forecast
    starts at its first day with cost, so 3 days ahead = 3 x 100 = $300 from 2 days of history
    (the five days' mean, 40 a day, would say $120). A history without any cost stays a known
    zero: 0, not "no history"."""
    f = forecast(history([0.0, 0.0, 0.0, 100.0, 100.0]), future(D0 + timedelta(days=5), 3))
    assert f.point == 300.0 and f.history_days == 2 and f.model == "mean"
    z = forecast(history([0.0] * 4), future(D0 + timedelta(days=4), 3))
    assert z.point == 0.0 and z.history_days == 4
