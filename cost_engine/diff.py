"""Why the cost changed between two periods: the change split into named effects that add up exactly.

Two computations of the same source (a base period and a new one) are reduced to `PeriodFacts`
(cost, GPU-hours, activity, requests and tokens per owner of the chosen dimension), and
`decompose` splits the change of the total into effects with the additive logarithmic mean
Divisia index (LMDI-I) and its zero-value rules: every cost is written as a product of
factors, and each factor's log-change, weighted by the logarithmic mean of the cost, is its
effect. The weights are normalised per element so the effects of each element add up to its
change to the last rounding bit: the residual is 0 (stated, and tested). docs/engine.md has
the formulas. Pure functions over frames: no Streamlit, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

import polars as pl

from .tokens import request_sums

if TYPE_CHECKING:
    from .engine import Computation

By = Literal["tenant", "project", "model", "pool"]
BY: tuple[str, ...] = ("tenant", "project", "model", "pool")
NONE_KEY = "(none)"
IDLE_KEY = "(idle)"
UNATTRIBUTED_KEY = "(unattributed)"
# |sum of the log-changes| below this: the two costs are equal to rounding, and the log-mean
# weight is taken as their mean (d / S would divide two rounding errors).
_FLAT = 1e-9


@dataclass(frozen=True)
class Effect:
    key: str
    group: str  # gpu | serving | other | owners
    label: str
    records: tuple[str, ...]  # the record tables behind it (views.records tables)
    short: str = ""  # a chart axis label


EFFECTS: tuple[Effect, ...] = (
    Effect("volume", "gpu", "Volume: allocated GPU-hours at constant efficiency", ("allocations",), "Volume"),
    Effect("efficiency", "gpu", "Efficiency: allocated GPU-hours per active GPU-hour", ("allocations",),
           "Efficiency"),
    Effect("mix", "gpu", "Mix: share of pools and accelerators", ("allocations",), "Mix"),
    Effect("price", "gpu", "Price: cost per allocated GPU-hour by pool and category", ("allocations", "costs"),
           "Price"),
    Effect("idle", "gpu", "Idle: the idle line, or idle cost charged to owners", ("allocations", "costs"), "Idle"),
    Effect("requests", "serving", "Requests sent", ("requests",), "Requests"),
    Effect("input_per_request", "serving", "Input tokens per request (uncached + cached)", ("requests",),
           "Input / request"),
    Effect("cache_hit_rate", "serving", "Cache hit rate (cached share of input tokens)", ("requests",),
           "Cache hit rate"),
    Effect("output_per_request", "serving", "Output tokens per request", ("requests",), "Output / request"),
    Effect("cost_per_token", "serving", "Cost per token of the models used", ("requests", "costs"), "Cost / token"),
    Effect("cost_per_request", "serving", "Cost per request of the models used (requests recharge)",
           ("requests", "costs"), "Cost / request"),
    Effect("direct", "other", "Direct and per-project costs", ("costs",), "Direct"),
    Effect("unattributed", "other", "Unattributed: owner keys that map to no project", (), "Unattributed"),
    Effect("new", "owners", "New in the period", ("allocations", "requests", "costs"), "New"),
    Effect("gone", "owners", "Gone in the period", ("allocations", "requests", "costs"), "Gone"),
)
EFFECT = {e.key: e for e in EFFECTS}
EFFECT_KEYS = tuple(e.key for e in EFFECTS)


# ------------------------------------------------------------------------------ period facts


@dataclass
class PeriodFacts:
    """What one period's cost is made of, per owner (`key`) of the chosen dimension.

    - gpu_cost: key, pool, accelerator, category, part (`own` | `idle` chargeback), cost: money
      that landed on owners through their own allocations (not recharged inference);
    - gpu_hours: key, pool, accelerator, allocated_h, covered_h, active_h (active over covered time);
    - serving_cost: key, model, cost: inference cost recharged onto the owners that sent requests;
    - serving_use: key, model, requests, input_tokens, cached_input_tokens, output_tokens;
    - direct: key, cost: money on owners not through an allocation (direct rows, project drivers);
    - idle, unattributed: the two buckets that are no owner's;
    - labels: key, tenant (the tenant of a project, for display; empty for other dimensions).
    """

    gpu_cost: pl.DataFrame
    gpu_hours: pl.DataFrame
    serving_cost: pl.DataFrame
    serving_use: pl.DataFrame
    direct: pl.DataFrame
    idle: float = 0.0
    unattributed: float = 0.0
    labels: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"key": pl.String, "tenant": pl.String}))

    @property
    def total(self) -> float:
        return (float(self.gpu_cost["cost"].sum()) + float(self.serving_cost["cost"].sum())
                + float(self.direct["cost"].sum()) + self.idle + self.unattributed)


GPU_COST_SCHEMA = {"key": pl.String, "pool": pl.String, "accelerator": pl.String, "category": pl.String,
                   "part": pl.String, "cost": pl.Float64}
GPU_HOURS_SCHEMA = {"key": pl.String, "pool": pl.String, "accelerator": pl.String, "allocated_h": pl.Float64,
                    "covered_h": pl.Float64, "active_h": pl.Float64}
SERVING_COST_SCHEMA = {"key": pl.String, "model": pl.String, "cost": pl.Float64}
SERVING_USE_SCHEMA = {"key": pl.String, "model": pl.String, "requests": pl.Float64, "input_tokens": pl.Float64,
                      "cached_input_tokens": pl.Float64, "output_tokens": pl.Float64}
DIRECT_SCHEMA = {"key": pl.String, "cost": pl.Float64}


def _cast(frame: pl.DataFrame, schema: Mapping[str, Any]) -> pl.DataFrame:
    return frame.select(pl.col(c).cast(t) for c, t in schema.items())


def facts(comp: Computation, by: str = "tenant") -> PeriodFacts:
    """The facts of one Computation, read from its public frames (`money`, `seg`, `requests`;
    sums over requests run on the streaming engine, as tokens.request_sums does for the report)."""
    if by not in BY:
        raise ValueError(f"unknown dimension {by!r}; one of {', '.join(BY)}")
    money, seg, req = comp.money.lazy(), comp.seg.lazy(), comp.requests.lazy()
    key = pl.col(by).fill_null(NONE_KEY).alias("key")
    # An allocation sits on one card: its pool and accelerator, for every money row it carries
    # (idle chargeback rows carry the allocation but no card).
    where = (seg.filter(pl.col("allocation_id").is_not_null()).group_by("allocation_id")
             .agg(pl.col("pool").first().alias("_pool"), pl.col("accelerator").first().alias("_acc")))
    owned = money.filter(pl.col("dest") == "owner")
    recharged = pl.col("origin").str.contains("+recharge", literal=True).fill_null(False)
    held = pl.col("allocation_id").is_not_null()
    gpu = (
        owned.filter(held & ~recharged).join(where, on="allocation_id", how="left")
        .with_columns(pl.coalesce("_pool", "pool").alias("pool"), pl.col("_acc").alias("accelerator"))
        .with_columns(key, pl.when(pl.col("origin").str.contains("+idle", literal=True)).then(pl.lit("idle"))
                      .otherwise(pl.lit("own")).alias("part"))
        .group_by("key", "pool", "accelerator", "category", "part").agg(pl.col("amount").sum().alias("cost"))
    )
    owned_seg = seg.filter(pl.col("allocation_id").is_not_null() & pl.col("project").is_not_null())
    covered = pl.col("covered_h").fill_null(0.0) > 0
    hours = owned_seg.with_columns(key).group_by("key", "pool", "accelerator").agg(
        pl.col("alloc_h").sum().alias("allocated_h"),
        pl.col("covered_h").fill_null(0.0).sum().alias("covered_h"),
        # Activity is known only where telemetry covered the held time: unknown is never 0.
        pl.col("active_h").filter(covered).sum().alias("active_h"),
    )
    serving = (owned.filter(recharged).with_columns(key)
               .group_by("key", "model").agg(pl.col("amount").sum().alias("cost")))
    sums = (pl.col("requests").sum(), pl.col("input_tokens").sum(), pl.col("cached_input_tokens").sum(),
            pl.col("output_tokens").sum())
    sent = req.filter(pl.col("project").is_not_null())
    if by == "pool":
        # Requests name no pool: a pool's serving cost is set against the requests of the models
        # it served in the period.
        served = seg.filter((pl.col("workload") == "inference") & pl.col("model").is_not_null()).select(
            pl.col("pool").fill_null(NONE_KEY).alias("key"), "model").unique()
        use = served.join(sent.group_by("model").agg(*sums), on="model")
    else:
        use = sent.with_columns(key).group_by("key", "model").agg(*sums)
    direct = owned.filter(~held & ~recharged).with_columns(key).group_by("key").agg(
        pl.col("amount").sum().alias("cost"))
    buckets = money.select(
        pl.col("amount").filter(pl.col("dest") == "idle").sum().alias("idle"),
        pl.col("amount").filter(pl.col("dest") == "unattributed").sum().alias("unattributed"),
    ).collect().row(0, named=True)
    if by == "project":
        labels = pl.concat([
            money.filter(pl.col("project").is_not_null()).select("project", "tenant").unique().collect(),
            seg.filter(pl.col("project").is_not_null()).select("project", "tenant").unique().collect(),
        ]).group_by("project").agg(pl.col("tenant").drop_nulls().first()).rename({"project": "key"})
    else:
        labels = pl.DataFrame(schema={"key": pl.String, "tenant": pl.String})
    return PeriodFacts(
        gpu_cost=_cast(gpu.collect(), GPU_COST_SCHEMA),
        gpu_hours=_cast(hours.collect(), GPU_HOURS_SCHEMA),
        serving_cost=_cast(serving.collect(), SERVING_COST_SCHEMA),
        serving_use=_cast(request_sums(use), SERVING_USE_SCHEMA),
        direct=_cast(direct.collect(), DIRECT_SCHEMA),
        idle=float(buckets["idle"] or 0.0),
        unattributed=float(buckets["unattributed"] or 0.0),
        labels=_cast(labels, {"key": pl.String, "tenant": pl.String}),
    )


# ---------------------------------------------------------------------------------- the result


@dataclass
class Diff:
    """The change between two periods and its effects.

    effects: effect, group, label, value (null: unknown), note, one row per effect in EFFECTS order;
    owners: one row per owner (kind `owner`) and the `idle` and `unattributed` lines: key, kind,
        status (both | new | gone), base_cost, new_cost, change, an effect column each, hours and
        requests of both periods, efficiency_known;
    elements: what each effect is made of: chain (gpu | serving | direct | idle | unattributed),
        key, pool, accelerator, category, part, model, token kind, base_cost, new_cost, change,
        an effect column each.
    `residual` = change - sum of the effects (0 to rounding).
    """

    by: str
    base_total: float
    new_total: float
    effects: pl.DataFrame
    owners: pl.DataFrame
    elements: pl.DataFrame
    notes: list[str]
    recharge: str
    method: str = "LMDI-I (additive logarithmic mean Divisia index), weights normalised per element"

    @property
    def change(self) -> float:
        return self.new_total - self.base_total

    @property
    def residual(self) -> float:
        return self.change - float(self.effects["value"].fill_null(0.0).sum())

    def owner(self, key: str) -> dict | None:
        rows = self.owners.filter((pl.col("kind") == "owner") & (pl.col("key") == key))
        return rows.row(0, named=True) if rows.height else None

    def owner_effects(self, key: str) -> pl.DataFrame:
        """One owner's effects as an effects table (effect, group, label, value)."""
        row = self.owner(key)
        keys = [k for k in self.effects["effect"].to_list()]
        return pl.DataFrame(
            [{"effect": k, "group": EFFECT[k].group, "label": EFFECT[k].label,
              "value": None if row is None else row.get(k)} for k in keys],
            schema={"effect": pl.String, "group": pl.String, "label": pl.String, "value": pl.Float64},
        )

    def to_dict(self) -> dict:
        """Plain JSON: numbers as numbers, a non-finite one as null (report's rule)."""
        from .report import _num, _rows

        return {
            "by": self.by,
            "method": self.method,
            "recharge": self.recharge,
            "base_total": _num(self.base_total),
            "new_total": _num(self.new_total),
            "change": _num(self.change),
            "residual": _num(self.residual),
            "effects": _rows(self.effects),
            "owners": _rows(self.owners),
            "elements": _rows(self.elements),
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------ LMDI core


def lmdi(elements: pl.DataFrame, factors: pl.DataFrame) -> pl.DataFrame:
    """Effects of each element's change: eid, effect, value (the values of an element sum to c1 - c0).

    elements: eid, c0, c1 (the element's cost in the base and the new period);
    factors: eid, effect, order, x0, x1 with c = the product of the element's x (both periods).

    Both costs positive and every factor positive: effect_f = (c1 - c0) * ln(x1/x0) / S with
    S = sum of the element's ln(x1/x0) (= ln(c1/c0): LMDI-I's L(c1, c0) * ln(x1/x0), normalised
    so the element adds up to its change exactly). An element that appears (c0 = 0) puts its
    whole change on the first factor, in chain order, that was 0 (or undefined) in the base; one
    that vanishes, on the first factor that is 0 in the new period (the limits of LMDI-I as the
    zero tends to 0). Anything else a product cannot explain goes to the chain's last factor.
    """
    d = pl.col("c1") - pl.col("c0")
    ok0 = (pl.col("x0").is_not_null() & pl.col("x0").is_finite() & (pl.col("x0") > 0)).fill_null(False)
    ok1 = (pl.col("x1").is_not_null() & pl.col("x1").is_finite() & (pl.col("x1") > 0)).fill_null(False)
    f = factors.join(elements.select("eid", "c0", "c1"), on="eid").with_columns(
        ok0.alias("ok0"), ok1.alias("ok1"),
    ).with_columns(
        pl.when(pl.col("ok0") & pl.col("ok1")).then((pl.col("x1") / pl.col("x0")).log()).otherwise(0.0).alias("lr"),
    )
    per = f.group_by("eid").agg(
        pl.col("lr").sum().alias("S"),
        (pl.col("ok0").all() & pl.col("ok1").all()).alias("valid"),
        pl.col("order").filter(~pl.col("ok0")).min().alias("bad0"),
        pl.col("order").filter(~pl.col("ok1")).min().alias("bad1"),
        pl.col("order").max().alias("last"),
    )
    f = f.join(per, on="eid")
    both = (pl.col("c0") > 0) & (pl.col("c1") > 0) & pl.col("valid")
    appears = (pl.col("c0") <= 0) & (pl.col("c1") > 0)
    vanishes = (pl.col("c1") <= 0) & (pl.col("c0") > 0)
    target = (
        pl.when(appears).then(pl.coalesce("bad0", "last"))
        .when(vanishes).then(pl.coalesce("bad1", "last"))
        .otherwise(pl.col("last"))
    )
    mean = (pl.col("c0") + pl.col("c1")) / 2
    flat = pl.col("S").abs() < _FLAT
    value = (
        pl.when(both & ~flat).then(d * pl.col("lr") / pl.col("S"))
        # Equal costs to rounding: L(c, c) = c; what rounding leaves goes to the last factor.
        .when(both & flat).then(
            mean * pl.col("lr")
            + pl.when(pl.col("order") == pl.col("last")).then(d - mean * pl.col("S")).otherwise(0.0))
        .otherwise(pl.when(pl.col("order") == target).then(d).otherwise(0.0))
    )
    return f.select("eid", "effect", value.alias("value"))


# --------------------------------------------------------------------------------- the chains


def _full(a: pl.DataFrame, b: pl.DataFrame, on: list[str], values: list[str]) -> pl.DataFrame:
    """Base and new side by side on `on`: each value as <v>0 and <v>1, missing = 0."""
    left = a.group_by(on).agg(pl.col(v).sum().alias(f"{v}0") for v in values)
    right = b.group_by(on).agg(pl.col(v).sum().alias(f"{v}1") for v in values)
    out = left.join(right, on=on, how="full", coalesce=True, nulls_equal=True)
    return out.with_columns(pl.col(f"{v}{i}").fill_null(0.0) for v in values for i in (0, 1))


def _safe_div(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    return pl.when(b > 0).then(a / b).otherwise(None)


def _factor(frame: pl.DataFrame, effect: str, order: int, x0: pl.Expr, x1: pl.Expr) -> pl.DataFrame:
    return frame.select("eid", pl.lit(effect).alias("effect"), pl.lit(order, dtype=pl.Int32).alias("order"),
                        x0.cast(pl.Float64).alias("x0"), x1.cast(pl.Float64).alias("x1"))


def _gpu_chain(base: PeriodFacts, new: PeriodFacts, eff_known: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """GPU cost element (key, pool, accelerator, category, part):
    c = W * (1/eta) * s * p  with W = H * eta (allocated hours at the key's efficiency), eta =
    active / covered hours of the key, s = the pool-accelerator's share of the key's allocated
    hours, p = cost per allocated hour of that category (price; idle chargeback: idle). Where
    eta is unknown in a period, the chain is H * s * p and the volume effect holds it all."""
    on = ["key", "pool", "accelerator", "category", "part"]
    el = _full(base.gpu_cost, new.gpu_cost, on, ["cost"]).rename({"cost0": "c0", "cost1": "c1"})
    h = _full(base.gpu_hours, new.gpu_hours, ["key", "pool", "accelerator"], ["allocated_h"])
    kh = eff_known.select("key", "H0", "H1", "eta0", "eta1", "eff_known")
    el = (el.join(h, on=["key", "pool", "accelerator"], how="left", nulls_equal=True).join(kh, on="key", how="left")
          .with_columns(pl.col("allocated_h0", "allocated_h1", "H0", "H1").fill_null(0.0),
                        pl.col("eff_known").fill_null(False))
          .with_row_index("eid").with_columns(pl.lit("gpu").alias("chain"), pl.col("eid").cast(pl.Int64)))
    known = pl.col("eff_known")
    volume = _factor(el, "volume", 0, pl.when(known).then(pl.col("H0") * pl.col("eta0")).otherwise(pl.col("H0")),
                     pl.when(known).then(pl.col("H1") * pl.col("eta1")).otherwise(pl.col("H1")))
    eff_rows = el.filter(known)
    efficiency = _factor(eff_rows, "efficiency", 1, _safe_div(pl.lit(1.0), pl.col("eta0")),
                         _safe_div(pl.lit(1.0), pl.col("eta1")))
    mix = _factor(el, "mix", 2, _safe_div(pl.col("allocated_h0"), pl.col("H0")),
                  _safe_div(pl.col("allocated_h1"), pl.col("H1")))
    price = pl.when(pl.col("part") == "idle").then(pl.lit("idle")).otherwise(pl.lit("price"))
    last = el.select("eid", price.alias("effect"), pl.lit(3, dtype=pl.Int32).alias("order"),
                     _safe_div(pl.col("c0"), pl.col("allocated_h0")).alias("x0"),
                     _safe_div(pl.col("c1"), pl.col("allocated_h1")).alias("x1"))
    return el, pl.concat([volume, efficiency, mix, last])


def _serving_chain(base: PeriodFacts, new: PeriodFacts, recharge: str,
                   weights: tuple[float, float, float]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Serving cost of (key, model), split by token kind in proportion to the weighted tokens:
    input  c = R * (P/R) * (1 - h) * pi_in     P = input + cached tokens, h = cached / P
    cached c = R * (P/R) * h       * pi_cached
    output c = R * (O/R)           * pi_out    pi = cost / tokens of that kind
    Under `requests` recharge the cost follows requests only: c = R * (cost per request)."""
    cost = _full(base.serving_cost, new.serving_cost, ["key", "model"], ["cost"])
    use_cols = ["requests", "input_tokens", "cached_input_tokens", "output_tokens"]
    use = _full(base.serving_use, new.serving_use, ["key", "model"], use_cols)
    t = cost.join(use, on=["key", "model"], how="left", nulls_equal=True).with_columns(
        pl.col(f"{c}{i}").fill_null(0.0) for c in use_cols for i in (0, 1))
    if recharge == "requests":
        el = (t.with_columns(pl.lit("requests").alias("kind"), pl.col("cost0").alias("c0"),
                             pl.col("cost1").alias("c1"))
              .with_row_index("eid").with_columns(pl.lit("serving").alias("chain"), pl.col("eid").cast(pl.Int64)))
        f = pl.concat([
            _factor(el, "requests", 0, pl.col("requests0"), pl.col("requests1")),
            _factor(el, "cost_per_request", 1, _safe_div(pl.col("c0"), pl.col("requests0")),
                    _safe_div(pl.col("c1"), pl.col("requests1"))),
        ])
        return el, f
    w_in, w_cached, w_out = weights
    parts = []
    for kind, w, col in (("input", w_in, "input_tokens"), ("cached", w_cached, "cached_input_tokens"),
                         ("output", w_out, "output_tokens")):
        exprs = []
        for i in (0, 1):
            wt = (w_in * pl.col(f"input_tokens{i}") + w_cached * pl.col(f"cached_input_tokens{i}")
                  + w_out * pl.col(f"output_tokens{i}"))
            # A cost with no weighted tokens behind it cannot be split: it stays whole on output.
            share = pl.when(wt > 0).then(w * pl.col(f"{col}{i}") / wt).otherwise(1.0 if kind == "output" else 0.0)
            exprs.append((pl.col(f"cost{i}") * share).alias(f"c{i}"))
        parts.append(t.with_columns(*exprs, pl.lit(kind).alias("kind")))
    el = (pl.concat(parts).filter((pl.col("c0") != 0) | (pl.col("c1") != 0))
          .with_row_index("eid").with_columns(pl.lit("serving").alias("chain"), pl.col("eid").cast(pl.Int64)))
    factors = []
    prompt = [pl.col(f"input_tokens{i}") + pl.col(f"cached_input_tokens{i}") for i in (0, 1)]
    req = [pl.col(f"requests{i}") for i in (0, 1)]
    inp, out = el.filter(pl.col("kind") != "output"), el.filter(pl.col("kind") == "output")
    factors.append(_factor(el, "requests", 0, req[0], req[1]))
    factors.append(_factor(inp, "input_per_request", 1, _safe_div(prompt[0], req[0]), _safe_div(prompt[1], req[1])))
    hit = [pl.when(pl.col("kind") == "cached").then(_safe_div(pl.col(f"cached_input_tokens{i}"), prompt[i]))
           .otherwise(_safe_div(pl.col(f"input_tokens{i}"), prompt[i])) for i in (0, 1)]
    factors.append(_factor(inp, "cache_hit_rate", 2, hit[0], hit[1]))
    factors.append(_factor(out, "output_per_request", 1, _safe_div(pl.col("output_tokens0"), req[0]),
                           _safe_div(pl.col("output_tokens1"), req[1])))
    tokens = [pl.when(pl.col("kind") == "input").then(pl.col(f"input_tokens{i}"))
              .when(pl.col("kind") == "cached").then(pl.col(f"cached_input_tokens{i}"))
              .otherwise(pl.col(f"output_tokens{i}")) for i in (0, 1)]
    factors.append(_factor(el, "cost_per_token", 3, _safe_div(pl.col("c0"), tokens[0]),
                           _safe_div(pl.col("c1"), tokens[1])))
    return el, pl.concat(factors)


def _single(frame: pl.DataFrame, chain: str, effect: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """An element explained by one factor, itself: its whole change is that effect."""
    el = frame.with_row_index("eid").with_columns(pl.lit(chain).alias("chain"), pl.col("eid").cast(pl.Int64))
    return el, _factor(el, effect, 0, pl.col("c0"), pl.col("c1"))


def _efficiency(base: PeriodFacts, new: PeriodFacts) -> pl.DataFrame:
    """Per key: allocated hours H, efficiency eta = active / covered hours, and whether eta is
    known (telemetry covered some held time and saw activity in both periods)."""
    k = _full(base.gpu_hours, new.gpu_hours, ["key"], ["allocated_h", "covered_h", "active_h"])
    return k.with_columns(
        pl.col("allocated_h0").alias("H0"), pl.col("allocated_h1").alias("H1"),
        _safe_div(pl.col("active_h0"), pl.col("covered_h0")).alias("eta0"),
        _safe_div(pl.col("active_h1"), pl.col("covered_h1")).alias("eta1"),
    ).with_columns(
        ((pl.col("eta0") > 0) & (pl.col("eta1") > 0)).fill_null(False).alias("eff_known"),
        pl.when((pl.col("covered_h0") <= 0) | (pl.col("covered_h1") <= 0)).then(pl.lit("no telemetry"))
        .when((pl.col("eta0") <= 0) | (pl.col("eta1") <= 0)).then(pl.lit("no active time"))
        .alias("eff_reason"),
    )


def _presence(base: PeriodFacts, new: PeriodFacts) -> pl.DataFrame:
    """Per key: cost, allocated hours and requests in each period, and its status."""
    zero = pl.lit(0.0)

    def side(p: PeriodFacts) -> pl.DataFrame:
        return pl.concat([
            p.gpu_cost.select("key", "cost", zero.alias("h"), zero.alias("r")),
            p.serving_cost.select("key", "cost", zero.alias("h"), zero.alias("r")),
            p.direct.select("key", "cost", zero.alias("h"), zero.alias("r")),
            p.gpu_hours.select("key", zero.alias("cost"), pl.col("allocated_h").alias("h"), zero.alias("r")),
            p.serving_use.select("key", zero.alias("cost"), zero.alias("h"), pl.col("requests").alias("r")),
        ]).group_by("key").agg(pl.col("cost").sum(), pl.col("h").sum(), pl.col("r").sum())
    t = side(base).rename({"cost": "base_cost", "h": "h0", "r": "r0"}).join(
        side(new).rename({"cost": "new_cost", "h": "h1", "r": "r1"}), on="key", how="full", coalesce=True,
        nulls_equal=True,
    ).with_columns(pl.col("base_cost", "new_cost", "h0", "h1", "r0", "r1").fill_null(0.0))
    there0 = (pl.col("base_cost") > 0) | (pl.col("h0") > 0) | (pl.col("r0") > 0)
    there1 = (pl.col("new_cost") > 0) | (pl.col("h1") > 0) | (pl.col("r1") > 0)
    return t.with_columns(
        pl.when(there0 & there1).then(pl.lit("both")).when(there1).then(pl.lit("new"))
        .when(there0).then(pl.lit("gone")).otherwise(pl.lit("none")).alias("status")
    )


_ELEMENT_COLS = {"chain": pl.String, "key": pl.String, "pool": pl.String, "accelerator": pl.String,
                 "category": pl.String, "part": pl.String, "model": pl.String, "kind": pl.String,
                 "c0": pl.Float64, "c1": pl.Float64}


def _elements_frame(frame: pl.DataFrame, offset: int) -> pl.DataFrame:
    cols = [pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
            for c, t in _ELEMENT_COLS.items()]
    return frame.select((pl.col("eid") + offset).alias("eid"), *cols)


def decompose(base: PeriodFacts, new: PeriodFacts, *, by: str = "tenant", recharge: str = "tokens",
              token_weights: tuple[float, float, float] = (1.0, 0.1, 4.0)) -> Diff:
    """Split new.total - base.total into the effects of EFFECTS (see module docstring)."""
    status = _presence(base, new)
    eff = _efficiency(base, new)
    chains = [
        _gpu_chain(base, new, eff),
        _serving_chain(base, new, recharge, token_weights),
        _single(_full(base.direct, new.direct, ["key"], ["cost"]).rename({"cost0": "c0", "cost1": "c1"}),
                "direct", "direct"),
        _single(pl.DataFrame({"key": [IDLE_KEY], "c0": [base.idle], "c1": [new.idle]}), "idle", "idle"),
        _single(pl.DataFrame({"key": [UNATTRIBUTED_KEY], "c0": [base.unattributed], "c1": [new.unattributed]}),
                "unattributed", "unattributed"),
    ]
    elements, factors, offset = [], [], 0
    for el, f in chains:
        elements.append(_elements_frame(el, offset))
        factors.append(f.with_columns(pl.col("eid") + offset))
        offset += el.height
    el = pl.concat(elements).filter((pl.col("c0") != 0) | (pl.col("c1") != 0))
    fx = pl.concat(factors).join(el.select("eid"), on="eid", how="semi")
    # Owners new or gone in the period: their elements are one line each, not factor effects.
    moved = status.filter(pl.col("status").is_in(["new", "gone"])).select("key", "status")
    el = el.join(moved, on="key", how="left")
    turnover = el.filter(pl.col("status").is_not_null() & ~pl.col("chain").is_in(["idle", "unattributed"]))
    fx = fx.join(turnover.select("eid"), on="eid", how="anti")
    values = pl.concat([
        lmdi(el.join(turnover.select("eid"), on="eid", how="anti"), fx),
        turnover.select("eid", pl.col("status").alias("effect"), (pl.col("c1") - pl.col("c0")).alias("value")),
    ])
    keys = [k for k in EFFECT_KEYS if not (k == "cost_per_request" and recharge != "requests")
            and not (k == "cost_per_token" and recharge == "requests")]
    wide = values.group_by("eid").agg(
        *(pl.col("value").filter(pl.col("effect") == k).sum().alias(k) for k in keys))
    elements_out = (
        el.drop("status").join(wide, on="eid", how="left")
        .with_columns(pl.col(k).fill_null(0.0) for k in keys)
        .rename({"c0": "base_cost", "c1": "new_cost"})
        .with_columns((pl.col("new_cost") - pl.col("base_cost")).alias("change"))
        .sort(["chain", "key", "pool", "accelerator", "category", "part", "model", "kind"], nulls_last=True)
        .select("chain", "key", "pool", "accelerator", "category", "part", "model", "kind", "base_cost",
                "new_cost", "change", *keys)
    )
    # Efficiency is unknown (not 0) for a key that held cards and paid for them in both periods
    # without activity measured in one of them.
    paying = elements_out.filter(pl.col("chain") == "gpu").group_by("key").agg(
        ((pl.col("base_cost") > 0) | (pl.col("new_cost") > 0)).any().alias("paid")).filter(pl.col("paid"))
    held = (eff.join(status.filter(pl.col("status") == "both").select("key"), on="key", how="semi")
            .join(paying.select("key"), on="key", how="semi").filter((pl.col("H0") > 0) & (pl.col("H1") > 0)))
    unknown = held.filter(~pl.col("eff_known"))
    known_any = held.filter(pl.col("eff_known")).height > 0
    labels = pl.concat([new.labels, base.labels]).unique("key", keep="first", maintain_order=True)
    owners = _owners(elements_out, status, eff, unknown, keys, labels)
    notes: list[str] = []
    effects_rows = []
    for k in keys:
        v = float(elements_out[k].sum())
        note = None
        if k == "efficiency" and unknown.height:
            names = unknown.sort("key")["key"].to_list()
            hours = float(unknown["H0"].sum() + unknown["H1"].sum())
            why = sorted(set(unknown["eff_reason"].drop_nulls().to_list()))
            note = (f"unknown for {len(names)} {by}(s) ({', '.join(why)}; {hours:,.1f} allocated GPU-hours in the two "
                    f"periods): {', '.join(names[:8])}{' …' if len(names) > 8 else ''}; their allocated-hours "
                    f"change is all in volume")
            notes.append(f"efficiency effect {note}")
            if not known_any:
                v = None
        elif k == "new":
            names = status.filter(pl.col("status") == "new").sort("key")["key"].to_list()
            if names:
                note = f"{len(names)} {by}(s): {', '.join(names[:8])}{' …' if len(names) > 8 else ''}"
        elif k == "gone":
            names = status.filter(pl.col("status") == "gone").sort("key")["key"].to_list()
            if names:
                note = f"{len(names)} {by}(s): {', '.join(names[:8])}{' …' if len(names) > 8 else ''}"
        effects_rows.append({"effect": k, "group": EFFECT[k].group, "label": EFFECT[k].label, "value": v,
                             "note": note})
    effects = pl.DataFrame(effects_rows, schema={"effect": pl.String, "group": pl.String, "label": pl.String,
                                                 "value": pl.Float64, "note": pl.String})
    if recharge == "requests":
        notes.append("inference is recharged by requests: tokens per request and the cache hit rate do not move "
                     "an owner's cost, so they have no effect")
    return Diff(by=by, base_total=base.total, new_total=new.total, effects=effects, owners=owners,
                elements=elements_out, notes=notes, recharge=recharge)


def _owners(elements: pl.DataFrame, status: pl.DataFrame, eff: pl.DataFrame, unknown: pl.DataFrame,
            keys: list[str], labels: pl.DataFrame) -> pl.DataFrame:
    kind = (pl.when(pl.col("chain") == "idle").then(pl.lit("idle"))
            .when(pl.col("chain") == "unattributed").then(pl.lit("unattributed")).otherwise(pl.lit("owner")))
    t = elements.with_columns(kind.alias("kind")).group_by("kind", "key").agg(
        pl.col("base_cost").sum(), pl.col("new_cost").sum(), pl.col("change").sum(), *(pl.col(k).sum() for k in keys))
    st = status.select("key", "status", pl.col("h0").alias("base_allocated_gpu_hours"),
                       pl.col("h1").alias("new_allocated_gpu_hours"), pl.col("r0").alias("base_requests"),
                       pl.col("r1").alias("new_requests"))
    owners = status.filter(pl.col("status") != "none").select("key", pl.lit("owner").alias("kind"))
    t = owners.join(t, on=["kind", "key"], how="full", coalesce=True).join(st, on="key", how="left")
    act = eff.select("key", pl.when(pl.col("covered_h0") > 0).then(pl.col("active_h0")).alias("base_active_gpu_hours"),
                     pl.when(pl.col("covered_h1") > 0).then(pl.col("active_h1")).alias("new_active_gpu_hours"),
                     "eff_known")
    t = t.join(act, on="key", how="left").with_columns(
        pl.when(pl.col("kind") == "owner").then(pl.col("status")).otherwise(pl.lit("both")).alias("status"),
        pl.col("base_cost", "new_cost", "change", *keys).fill_null(0.0),
        pl.col("base_allocated_gpu_hours", "new_allocated_gpu_hours", "base_requests", "new_requests").fill_null(0.0),
        pl.col("eff_known").fill_null(False).alias("efficiency_known"),
    )
    if "efficiency" in keys:
        t = t.with_columns(pl.when(pl.col("key").is_in(unknown["key"].to_list()) & (pl.col("kind") == "owner"))
                           .then(None).otherwise(pl.col("efficiency")).alias("efficiency"))
    if labels.height:
        t = t.join(labels, on="key", how="left")
    else:
        t = t.with_columns(pl.lit(None, dtype=pl.String).alias("tenant"))
    cols = ["kind", "key", "tenant", "status", "base_cost", "new_cost", "change", *keys,
            "base_allocated_gpu_hours", "new_allocated_gpu_hours", "base_active_gpu_hours", "new_active_gpu_hours",
            "efficiency_known", "base_requests", "new_requests"]
    order = pl.when(pl.col("kind") == "owner").then(0).otherwise(1)
    return t.select(cols).with_columns(order.alias("_o"), pl.col("change").abs().alias("_a")).sort(
        ["_o", "_a", "key"], descending=[False, True, False]).drop("_o", "_a")


def top_elements(d: Diff, effect: str, n: int = 3, key: str | None = None) -> pl.DataFrame:
    """The elements carrying most of an effect (largest first by size): what to look at first."""
    e = d.elements if key is None else d.elements.filter(pl.col("key") == key)
    return e.filter(pl.col(effect) != 0).sort(pl.col(effect).abs(), descending=True).head(n)


def describe_element(row: Mapping[str, Any]) -> str:
    """A short name for an element: `h100-train · H100 · power`, `llama · output tokens`, ..."""
    chain = row.get("chain")
    if chain == "gpu":
        parts = [row.get("pool"), row.get("accelerator"), row.get("category")]
        s = " · ".join(str(p) for p in parts if p)
        return s + (" (idle chargeback)" if row.get("part") == "idle" else "")
    if chain == "serving":
        if row.get("kind") == "requests":
            return str(row.get("model"))
        return f"{row.get('model')} · {row.get('kind')} tokens"
    return str(chain)


# ------------------------------------------------------------------------------------- periods


def parse_span(text: str, tz: str) -> tuple[datetime, datetime]:
    """A period as the CLI and the dashboard spell it, as UTC instants [start, end).

    `YYYY-MM` (a calendar month), `YYYY-MM-DD..YYYY-MM-DD` (whole days, both included), or
    `START..END` with ISO timestamps carrying an offset (half-open). Days and months are cut in
    `tz` (the period's time zone)."""
    zone = ZoneInfo(tz)
    s = text.strip()
    if ".." not in s:
        try:
            y, m = (int(p) for p in s.split("-"))
            first = date(y, m, 1)
        except ValueError:
            raise ValueError(f"{text!r}: give START..END (dates or timestamps with an offset) or a month YYYY-MM")
        nxt = date(y + (m == 12), m % 12 + 1, 1)
        return _day_start(first, zone), _day_start(nxt, zone)
    a, _, b = s.partition("..")
    start, end = _instant(a.strip(), zone, text, end=False), _instant(b.strip(), zone, text, end=True)
    if end <= start:
        raise ValueError(f"{text!r}: the end is not after the start")
    return start, end


def _day_start(d: date, zone: ZoneInfo) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=zone).astimezone(timezone.utc)


def _instant(part: str, zone: ZoneInfo, text: str, *, end: bool) -> datetime:
    try:
        d = date.fromisoformat(part)
    except ValueError:
        d = None
    if d is not None:
        return _day_start(d + timedelta(days=1) if end else d, zone)
    try:
        t = datetime.fromisoformat(part.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r}: {part!r} is neither a date (YYYY-MM-DD) nor an ISO timestamp")
    if t.tzinfo is None:
        raise ValueError(f"{text!r}: timestamp {part!r} has no offset (add Z or +HH:MM)")
    return t.astimezone(timezone.utc)
