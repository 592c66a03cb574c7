"""Forecast a daily cost series to the end of a period, with 80 % and 95 % intervals.

The model (docs/budgets.md writes out every formula) is a weighted linear model of the cost
rate per 24 hours: a level, a linear trend, and one additive effect per weekday shrunk toward
zero, fitted by backfitting. Which terms it has depends on how much history there is: fewer
than 7 days give the mean only, fewer than 28 no trend. Days covered in part (the edges of
the data, a day cut by a period edge, a 23- or 25-hour day at a DST change) count with the
hours they cover. The interval of a sum over the days ahead adds the residual noise
(correlated from one day to the next as an AR(1)), a random walk of the level (its variance
per day estimated from the residuals) and the uncertainty of the fitted terms, with Student-t
quantiles on the residual degrees of freedom.

Pure functions over frames and numpy arrays: no engine, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

HOURS_PER_DAY = 24.0
LOOKBACK_DAYS = 56  # history used for a fit: the last eight weeks before the forecast
WEEKDAY_MIN_DAYS = 7.0  # (effective) days of history before weekday effects are fitted
TREND_MIN_DAYS = 28.0  # ... before a trend is fitted (four weeks: a shorter trend is mostly noise; see the backtest)
DAMPING = 0.9  # per day: a trend's reach fades (a damped trend); 10 days' worth at most
KAPPA = 1.0  # weekday shrinkage: an effect seen on w days keeps w / (w + KAPPA) of its mean
RHO_MAX = 0.9  # cap on the day-to-day correlation of residuals
# A day's cost is never known better than this share of its level: a few identical days have
# no residual, yet a month ahead is not certain (the interval's floor; docs/budgets.md).
NOISE_FLOOR = 0.05
_BACKFIT_ROUNDS = 50
# Normal quantiles of the two-sided 80 % and 95 % intervals.
_Z = {0.8: 1.2815515655446004, 0.95: 1.959963984540054}

MODEL_NAMES = {
    "none": "no history",
    "mean": "mean daily cost",
    "weekday": "level + weekday effects",
    "weekday_trend": "level + linear trend + weekday effects",
}

HISTORY_SCHEMA = pl.Schema({"day": pl.Date, "cost": pl.Float64, "hours": pl.Float64})
FUTURE_SCHEMA = pl.Schema({"day": pl.Date, "hours": pl.Float64})
PATH_SCHEMA = pl.Schema(
    {
        "day": pl.Date,
        "hours": pl.Float64,
        "cost": pl.Float64,
        "cum": pl.Float64,
        "cum_lo80": pl.Float64,
        "cum_hi80": pl.Float64,
        "cum_lo95": pl.Float64,
        "cum_hi95": pl.Float64,
    }
)


@dataclass(frozen=True)
class Forecast:
    """The forecast of a sum of daily costs over the days ahead.

    `point` and the bounds are sums over every future day; `path` has the same day by day,
    cumulated, for a burn-down chart. Bounds are None where the history is too short to
    estimate the spread (one day, or as many days as terms); `point` is None without history.
    """

    model: str  # a key of MODEL_NAMES
    history_days: int  # days of history the fit used (days with any covered hour)
    point: float | None
    lo80: float | None
    hi80: float | None
    lo95: float | None
    hi95: float | None
    path: pl.DataFrame  # PATH_SCHEMA
    sigma: float | None = None  # residual standard deviation of a full day's cost
    dof: float | None = None  # residual degrees of freedom
    rho: float = 0.0  # day-to-day correlation of the residuals used for the interval
    drift: float = 0.0  # variance per day of the level's random walk used for the interval

    @property
    def description(self) -> str:
        return f"{MODEL_NAMES[self.model]} ({self.history_days} days)"


def t_quantile(p: float, dof: float) -> float:
    """Quantile p of Student's t with `dof` degrees of freedom (p in {0.9, 0.975}).

    Exact for 1 and 2 degrees of freedom; above, the Cornish-Fisher expansion in 1/dof
    (within 0.2 % of the exact value at 3 degrees of freedom, closer beyond).
    """
    if dof <= 0:
        raise ValueError("t quantile needs dof > 0")
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = {0.9: _Z[0.8], 0.975: _Z[0.95]}[round(p, 6)]
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3 + g4 / dof**4


def _days(col: pl.Series) -> np.ndarray:
    return col.cast(pl.Int32).to_numpy().astype(np.float64)  # days since 1970-01-01


def _weekday(col: pl.Series) -> np.ndarray:
    return (col.dt.weekday() - 1).to_numpy().astype(np.int64)  # Monday 0 .. Sunday 6


@dataclass(frozen=True)
class _Fit:
    model: str
    level: float
    slope: float
    t_mean: float
    sxx: float  # sum of w * (t - t_mean)^2 (0 without trend)
    w_sum: float
    effects: np.ndarray  # per weekday
    w_day: np.ndarray  # weight of each weekday in the history
    sigma: float | None
    dof: float | None
    rho: float
    drift: float
    days: int
    t_first: float
    t_last: float
    damping: float = DAMPING


def fit(history: pl.DataFrame, lookback_days: int = LOOKBACK_DAYS, trend_min_days: float = TREND_MIN_DAYS,
        damping: float = DAMPING) -> _Fit:
    """Fit the model on (day, cost, hours): the cost booked on each day over `hours` covered.
    `trend_min_days` and `damping` are the model's constants (the backtest tries others)."""
    h = history.filter(pl.col("hours") > 0).sort("day")
    if h.height and lookback_days:
        h = h.filter(pl.col("day") > h["day"].max() - pl.duration(days=lookback_days))
    # An owner that began mid-history (a new project) is forecast from its first day with cost:
    # the days before it say nothing about its pace (the backtest's "new" owners ran -54 % low
    # on day 10 with them). All days without cost stay: a known zero.
    paid = h.filter(pl.col("cost") > 0)
    if paid.height:
        h = h.filter(pl.col("day") >= paid["day"].min())
    n = h.height
    if n == 0:
        return _Fit("none", 0.0, 0.0, 0.0, 0.0, 0.0, np.zeros(7), np.zeros(7), None, None, 0.0, 0.0, 0, 0.0, 0.0,
                    damping)
    w = h["hours"].to_numpy() / HOURS_PER_DAY
    y = h["cost"].to_numpy() / w  # the cost of a full day at that day's rate
    t = _days(h["day"])
    dow = _weekday(h["day"])
    w_sum = float(w.sum())
    use_week = w_sum >= WEEKDAY_MIN_DAYS
    use_trend = w_sum >= trend_min_days
    model = "weekday_trend" if use_trend else "weekday" if use_week else "mean"
    t_mean = float((w * t).sum() / w_sum)
    tc = t - t_mean
    sxx = float((w * tc * tc).sum()) if use_trend else 0.0
    w_day = np.bincount(dow, weights=w, minlength=7)
    effects = np.zeros(7)
    level = slope = 0.0
    # Backfitting: level and trend on the cost less the weekday effects, then the effects as the
    # shrunk weighted mean residual of each weekday, until nothing moves.
    for _ in range(_BACKFIT_ROUNDS):
        z = y - effects[dow]
        level = float((w * z).sum() / w_sum)
        slope = float((w * tc * (z - level)).sum() / sxx) if use_trend and sxx > 0 else 0.0
        if not use_week:
            break
        r = y - level - slope * tc
        new = np.bincount(dow, weights=w * r, minlength=7) / (w_day + KAPPA)
        done = np.allclose(new, effects, rtol=0, atol=1e-9 * (1 + abs(level)))
        effects = new
        if done:
            break
    resid = y - level - slope * tc - effects[dow]
    terms = 1.0 + (1.0 if use_trend else 0.0) + (float((w_day / (w_day + KAPPA)).sum()) if use_week else 0.0)
    dof = w_sum - terms
    sigma = math.sqrt(float((w * resid * resid).sum()) / dof) if dof >= 1 else None
    if sigma is not None:
        sigma = max(sigma, NOISE_FLOOR * abs(level))
    return _Fit(model, level, slope, t_mean, sxx, w_sum, effects, w_day, sigma, dof if dof >= 1 else None,
                _lag1(t, resid), _drift(t, resid), n, float(t[0]), float(t[-1]), damping)


def _lag1(t: np.ndarray, resid: np.ndarray) -> float:
    """Correlation of residuals on consecutive days (0 below three pairs), clipped to [0, RHO_MAX]."""
    pairs = np.flatnonzero(np.diff(t) == 1)
    den = float((resid * resid).sum())
    if pairs.size < 3 or den == 0:
        return 0.0
    rho = float((resid[pairs] * resid[pairs + 1]).sum()) / den
    return min(max(rho, 0.0), RHO_MAX)


def _drift(t: np.ndarray, resid: np.ndarray) -> float:
    """Variance per day of a random walk in the level, from consecutive residuals (method of
    moments of the local-level model: with d_t = e_t - e_(t-1), E[d^2] = q + 2 s^2 and
    E[d_t d_(t-1)] = -s^2, so q = E[d^2] + 2 E[d_t d_(t-1)]); 0 below three differences."""
    step = np.flatnonzero(np.diff(t) == 1)
    d = resid[step + 1] - resid[step]
    run = np.flatnonzero(np.diff(step) == 1)  # consecutive differences
    if d.size < 3 or run.size < 2:
        return 0.0
    return max(float((d * d).mean() + 2 * (d[run] * d[run + 1]).mean()), 0.0)


def forecast(history: pl.DataFrame, future: pl.DataFrame, lookback_days: int = LOOKBACK_DAYS,
             trend_min_days: float = TREND_MIN_DAYS, damping: float = DAMPING) -> Forecast:
    """The cost of the `future` days (day, hours to forecast) from the `history` (day, cost, hours)."""
    f = fit(history, lookback_days, trend_min_days, damping)
    fut = future.filter(pl.col("hours") > 0).sort("day")
    if fut.height == 0:
        empty = pl.DataFrame(schema=PATH_SCHEMA)
        if f.model == "none":
            return Forecast(f.model, 0, None, None, None, None, None, empty)
        return Forecast(f.model, f.days, 0.0, 0.0, 0.0, 0.0, 0.0, empty, f.sigma, f.dof, f.rho, f.drift)
    v = fut["hours"].to_numpy() / HOURS_PER_DAY
    t = _days(fut["day"])
    dow = _weekday(fut["day"])
    base = fut.select("day", "hours")
    if f.model == "none":
        nulls = [pl.lit(None, pl.Float64).alias(c) for c in list(PATH_SCHEMA)[2:]]
        return Forecast(f.model, 0, None, None, None, None, None, base.with_columns(nulls))
    x = _trend_x(f, t)
    mean = np.maximum(f.level + f.slope * x + f.effects[dow], 0.0)  # a cost is never negative
    cost = v * mean
    cum = np.cumsum(cost)
    bounds: dict[str, np.ndarray | None] = {}
    if f.sigma is None or f.dof is None:
        for level in (80, 95):
            bounds[f"lo{level}"] = bounds[f"hi{level}"] = None
    else:
        se = np.sqrt(_cumulative_variance(f, v, t, dow))
        for level, p in ((80, 0.9), (95, 0.975)):
            half = t_quantile(p, f.dof) * se
            bounds[f"lo{level}"] = np.maximum(cum - half, 0.0)
            bounds[f"hi{level}"] = cum + half
    path = base.with_columns(
        pl.Series("cost", cost),
        pl.Series("cum", cum),
        *(pl.Series(f"cum_{k}", b if b is not None else [None] * len(cum), dtype=pl.Float64) for k, b in bounds.items()),
    ).select(list(PATH_SCHEMA))

    def last(k: str) -> float | None:
        b = bounds[k]
        return None if b is None else float(b[-1])

    return Forecast(f.model, f.days, float(cum[-1]), last("lo80"), last("hi80"), last("lo95"), last("hi95"), path,
                    f.sigma, f.dof, f.rho, f.drift)


def _trend_x(f: _Fit, t: np.ndarray) -> np.ndarray:
    """The trend's regressor for days outside the history, damped: h days past its last day the
    line has moved sum_{j=1..h} DAMPING^j days' worth of slope (at most DAMPING / (1 - DAMPING)),
    and likewise backwards before its first day."""
    ahead = np.maximum(t - f.t_last, 0.0)
    back = np.maximum(f.t_first - t, 0.0)
    phi = f.damping
    reach = (lambda h: h) if phi >= 1 else (lambda h: phi * (1 - phi**h) / (1 - phi))  # noqa: E731
    inside = np.clip(t, f.t_first, f.t_last) - f.t_mean
    return inside + reach(ahead) - reach(back)


def _cumulative_variance(f: _Fit, v: np.ndarray, t: np.ndarray, dow: np.ndarray) -> np.ndarray:
    """Variance of the forecast's running sum after each future day (noise + fitted terms).

    noise: Var(sum) = s^2 [sum_i v_i + sum_{i != j} v_i v_j rho^|t_i - t_j|]  (v: share of a day ahead)
    terms: s^2 [ (sum v)^2 / W + (sum v (t - t_mean))^2 / Sxx + sum_k (sum_{dow k} v)^2 / (W_k + kappa) ]
    """
    s2 = (f.sigma or 0.0) ** 2
    # The cross terms by recurrence (linear in the days ahead, not quadratic):
    # c_m = sum_{i<m} v_i rho^(t_m - t_i) = rho^(t_m - t_{m-1}) (c_{m-1} + v_{m-1}).
    cross = np.zeros(len(v))
    for m in range(1, len(v)):
        cross[m] = f.rho ** (t[m] - t[m - 1]) * (cross[m - 1] + v[m - 1])
    noise = np.cumsum(v + 2 * v * cross)
    params = np.cumsum(v) ** 2 / f.w_sum
    if f.sxx > 0:
        params = params + np.cumsum(v * _trend_x(f, t)) ** 2 / f.sxx
    if f.model in ("weekday", "weekday_trend"):
        onehot = np.zeros((len(v), 7))
        onehot[np.arange(len(v)), dow] = v
        params = params + (np.cumsum(onehot, axis=0) ** 2 / (f.w_day + KAPPA)).sum(axis=1)
    return s2 * (noise + params) + f.drift * _walk(v, t, f.t_first, f.t_last)


def _walk(v: np.ndarray, t: np.ndarray, t_first: float, t_last: float) -> np.ndarray:
    """Running sum of sum_ij v_i v_j min(h_i, h_j) over days on the same side of the history, h the
    days from its nearest edge: the variance (per unit of drift) a random-walk level adds."""
    out = np.zeros(len(v))
    total = 0.0
    sums = {True: [0.0, 0.0], False: [0.0, 0.0]}  # per side: sum of v, sum of v * h so far
    for m in range(len(v)):
        before = t[m] < t_first
        h = (t_first - t[m]) if before else max(t[m] - t_last, 0.0)
        sv, svh = sums[before]
        # Before the data h shrinks day by day (the earlier day is farther): min is this day's h.
        cross = h * sv if before else svh
        total += v[m] * v[m] * h + 2 * v[m] * cross
        sums[before] = [sv + v[m], svh + v[m] * h]
        out[m] = total
    return out
