"""The FOCUS export's charges: every money row grouped into an origin charge and split rows.

FOCUS 1.3 describes a split cost allocation as an *origin charge* (what a resource cost in a
charge period) cut into *allocated charges* that keep the origin's dimensions and unit price,
each carrying its share (`AllocatedRatio`) and what it went to (`AllocatedResourceId`, null
for the unallocated portion). Our money frame is exactly such a split; this module names the
origin of every money row and sums the rows of each (origin, destination):

- card:  a card's cost of one category on one day (ResourceId = the card), split between the
  allocations that held it and its unallocated (idle) time by cause;
- pool:  with `idle = "proportional"`, a pool's idle cost charged back on one day, split
  between the pool's allocations by allocated GPU-hours;
- model: a model's serving cost in one pool on one day, recharged to the projects that sent
  it requests (the unmapped callers' part is unallocated);
- cost:  a cost row on one day: spread by project drivers (tokens, requests, shares, even),
  kept whole as unallocated when nothing could carry it (`unspread`), or a direct cost of one
  project (not a split).

Reads `Computation.money` only through dest, tenant, project, u_source, u_key, allocation_id,
gpu_id, pool, model, workload, day, category, origin, driver, cost_id, amount; the quantities
come from the segment ledger (`seg`) and the idle pieces (`idle`).
"""

from __future__ import annotations

import polars as pl

from ..allocation import SEGMENT_DRIVERS
from ..contract import IDLE, UNATTRIBUTED
from ..engine import Computation

PROVIDER = "Internal GPU fleet"
# Prefix of our tag keys (FOCUS: data-generator-defined tag keys carry a documented prefix).
TAG_PREFIX = "ailedger/"
GPU_HOURS = "GPU-Hours"
KWH = "kWh"
HOURS = "Hours"

# The segment column that measures each driver (measured energy is priced on facility kWh).
DRIVER_QUANTITY = dict(SEGMENT_DRIVERS) | {"measured_energy": "kwh_fac"}
ENERGY_DRIVERS = ("energy", "measured_energy")
# What each driver meters (SkuMeter); cost rows are priced per hour of their term.
METERS = {
    "capacity_hours": "GPU capacity hours",
    "gpu_hours": "Allocated GPU hours",
    "active_hours": "Active GPU hours",
    "utilization": "Utilized GPU hours",
    "energy": "Facility energy",
    "measured_energy": "Metered facility energy",
    "term": "Cost term hours",
}
MONEY_COLUMNS = ("dest", "tenant", "project", "u_source", "u_key", "allocation_id", "gpu_id", "pool", "model",
                 "workload", "day", "category", "origin", "driver", "cost_id", "amount")
_PARTY = ["dest", "tenant", "project", "u_source", "u_key"]
_HOLDER = ["allocation_id", *_PARTY, "model", "workload"]


def charges(comp: Computation) -> pl.DataFrame:
    """One row per (origin charge, destination): the money, its origin and the quantities
    that price it (see the module doc). The amounts sum to the money frame's total."""
    m = comp.money.select(MONEY_COLUMNS).with_columns(
        pl.col("origin").str.replace(r"\+.*$", "").alias("base"),
    )
    recharge = pl.col("origin").str.contains("+recharge", literal=True)
    chargeback = pl.col("origin").str.contains("+idle", literal=True)
    on_card = pl.col("gpu_id").is_not_null()
    parts = [
        _card_rows(comp, m.filter(~recharge & ~chargeback & on_card)),
        _pool_rows(comp, m.filter(~recharge & chargeback)),
        _model_rows(comp, m.filter(recharge)),
        _cost_rows(comp, m.filter(~recharge & ~chargeback & ~on_card)),
    ]
    rows = pl.concat([p for p in parts if p.height], how="diagonal_relaxed") if any(p.height for p in parts) \
        else pl.DataFrame(schema={"kind": pl.String, "amount": pl.Float64})
    for name, dtype in _SCHEMA.items():
        if name not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype).alias(name))
    # A fixed row order: the origins' sums (and so the ratios) come out the same every run.
    rows = rows.select(_SCHEMA.keys()).cast(_SCHEMA).sort(
        "origin_id", "allocated_id", "idle_cause", "dest", "tenant", "project", "u_source", "u_key", "model",
        nulls_last=True,
    )
    return _priced(rows, comp.period)


# Columns of the charge frame (what focus.py turns into FOCUS columns).
_SCHEMA = pl.Schema({
    "kind": pl.String, "day": pl.Date, "origin_id": pl.String, "base": pl.String, "category": pl.String,
    "driver": pl.String, "method": pl.String, "split": pl.Boolean, "amount": pl.Float64, "q": pl.Float64,
    "origin_q": pl.Float64, "unit": pl.String, "resource_id": pl.String, "resource_name": pl.String,
    "resource_type": pl.String, "service": pl.String, "subcategory": pl.String, "sub_account": pl.String,
    "provider": pl.String, "publisher": pl.String, "host_provider": pl.String, "infrastructure": pl.Boolean,
    "description": pl.String,
    "tags": pl.String, "allocated_id": pl.String, "allocated_name": pl.String, "allocated_tags": pl.String,
    "idle_cause": pl.String, "cost_id": pl.String, "dest": pl.String, "tenant": pl.String, "project": pl.String,
    "u_source": pl.String, "u_key": pl.String, "model": pl.String, "pool": pl.String, "origin": pl.String,
    "kwh_gpu": pl.Float64, "kwh_fac": pl.Float64, "input_tokens": pl.Int64, "cached_input_tokens": pl.Int64,
    "output_tokens": pl.Int64, "span_start": pl.Datetime("us", "UTC"), "span_end": pl.Datetime("us", "UTC"),
})


def _priced(rows: pl.DataFrame, period) -> pl.DataFrame:
    """Each row's ratio in its origin, and the origin's quantity and unit: the rows' driver
    quantities (or the cost row's term hours); where none is known, the charge period's hours."""
    origin_amount = pl.col("amount").sum().over("origin_id")
    n = pl.len().over("origin_id")
    day0, day1 = day_bounds(pl.col("day"), period)
    rows = rows.with_columns(
        pl.coalesce("span_start", day0).alias("span_start"),
        pl.coalesce("span_end", day1).alias("span_end"),
        pl.when(origin_amount != 0).then(pl.col("amount") / origin_amount).otherwise(1.0 / n).alias("ratio"),
        origin_amount.alias("origin_amount"),
        pl.coalesce(pl.col("origin_q"), pl.col("q").sum().over("origin_id")).alias("origin_q"),
    )
    known = pl.col("origin_q") > 0
    period_h = (pl.col("span_end") - pl.col("span_start")).dt.total_microseconds() / 3.6e9
    return rows.with_columns(
        pl.col("unit").alias("usage_unit"),
        pl.when(known).then(pl.col("origin_q")).otherwise(period_h).alias("origin_q"),
        pl.when(known).then(pl.col("unit")).otherwise(pl.lit(HOURS)).alias("unit"),
    )


def json_object(pairs: dict[str, pl.Expr]) -> pl.Expr:
    """A JSON object of the non-null values (null when all are null), each value escaped by Polars."""
    parts = [
        pl.when(e.is_not_null()).then(pl.struct(e.alias(k)).struct.json_encode().str.slice(1).str.strip_suffix("}"))
        for k, e in pairs.items()
    ]
    body = pl.concat_list(parts).list.drop_nulls().list.join(",")
    return pl.when(body != "").then(pl.lit("{") + body + pl.lit("}"))


def _tags(**pairs: pl.Expr) -> pl.Expr:
    return json_object({f"{TAG_PREFIX}{k}": v for k, v in pairs.items()})


def _origin_id(*parts: pl.Expr) -> pl.Expr:
    return pl.concat_str([p.cast(pl.String).fill_null("-") for p in parts], separator="/")


def _driver_quantity(driver: pl.Expr, prefix: str = "") -> pl.Expr:
    q = pl.lit(None, pl.Float64)
    for drv, col in DRIVER_QUANTITY.items():
        q = pl.when(driver == drv).then(pl.col(f"{prefix}{col}")).otherwise(q)
    return q


def _driver_unit(driver: pl.Expr) -> pl.Expr:
    return (pl.when(driver.is_in(ENERGY_DRIVERS)).then(pl.lit(KWH))
            .when(driver.is_in(list(DRIVER_QUANTITY))).then(pl.lit(GPU_HOURS)))


def _sum(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return frame.group_by(keys, maintain_order=True).agg(
        pl.col("amount").sum(), pl.col("origin").unique().sort().str.join("|"),
    )


def _allocation_info(comp: Computation) -> pl.DataFrame:
    return comp.allocations.select("allocation_id", "job_id").unique("allocation_id")


def _holder_columns(alloc_id: pl.Expr) -> list[pl.Expr]:
    """Allocated resource = the allocation (named by its job); tags = who and what held it."""
    return [
        alloc_id.alias("allocated_id"),
        pl.when(alloc_id.is_not_null()).then(pl.coalesce("job_id", "allocation_id")).alias("allocated_name"),
        pl.when(alloc_id.is_not_null()).then(_tags(tenant=pl.col("tenant"), project=pl.col("project"),
                                                   job=pl.col("job_id"), workload=pl.col("workload"),
                                                   model=pl.col("model"))).alias("allocated_tags"),
    ]


def _fleet_charge(kind: str, origin_id: pl.Expr, method: pl.Expr, unit: pl.Expr, resource: pl.Expr,
                  resource_name: pl.Expr, resource_type: pl.Expr, service: tuple[str, str]) -> list[pl.Expr]:
    """The origin columns of a charge on the fleet's own infrastructure (a card, a pool, a
    model served from a pool): split, in the pool's sub account, provided and hosted by us."""
    return [
        pl.lit(kind).alias("kind"),
        origin_id.alias("origin_id"),
        method.alias("method"),
        pl.lit(True).alias("split"),
        unit.alias("unit"),
        resource.alias("resource_id"),
        resource_name.alias("resource_name"),
        resource_type.alias("resource_type"),
        pl.lit(service[0]).alias("service"),
        pl.lit(service[1]).alias("subcategory"),
        pl.col("pool").alias("sub_account"),
        pl.lit(PROVIDER).alias("provider"),
        pl.lit(PROVIDER).alias("host_provider"),
        pl.lit(True).alias("infrastructure"),
    ]


GPU_COMPUTE = ("GPU Compute", "AI Platforms")

# ----------------------------------------------------------------------------------- card


def card_names(comp: Computation) -> pl.DataFrame:
    """gpu_id -> a display name: node, index on the node (inventory order), kind, accelerator
    (which names the MIG profile), e.g. `h100-node-01 GPU 3 (H100-SXM-80GB)`; the pool stands
    in for a missing node. Null when the inventory has no node or pool for the card."""
    cards = comp.ledger.cards.select("gpu_id", "pool", "node", "accelerator")
    is_mig = pl.col("gpu_id").str.starts_with("MIG-") | pl.col("accelerator").str.contains("MIG").fill_null(False)
    kind = pl.when(is_mig).then(pl.lit("MIG")).otherwise(pl.lit("GPU"))
    host = pl.coalesce("node", "pool")
    idx = pl.int_range(pl.len()).over(host, kind)
    label = pl.concat_str([host, pl.lit(" "), kind, pl.lit(" "), idx.cast(pl.String)])
    name = (
        pl.when(pl.col("accelerator").is_null()).then(label)
        .otherwise(pl.concat_str([label, pl.lit(" ("), pl.col("accelerator"), pl.lit(")")]))
    )
    return cards.select(
        "gpu_id", "node", "accelerator", name.alias("card_name"),
        pl.when(is_mig).then(pl.lit("GPU MIG Instance")).otherwise(pl.lit("GPU")).alias("card_type"),
    )


def _card_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    origin_keys = ["day", "gpu_id", "pool", "category", "driver", "base"]
    rows = _sum(m, [*origin_keys, *_HOLDER])
    held = rows.filter(pl.col("allocation_id").is_not_null())
    free = rows.filter(pl.col("allocation_id").is_null())

    # Driver quantities of each holder's card-time that day.
    qcols = sorted(set(DRIVER_QUANTITY.values()) | {"kwh_gpu"})
    seg_q = comp.seg.filter(pl.col("allocation_id").is_not_null()).group_by("day", "gpu_id", "allocation_id").agg(
        pl.col(qcols).sum()
    )
    held = held.join(seg_q, on=["day", "gpu_id", "allocation_id"], how="left").with_columns(
        _driver_quantity(pl.col("driver")).alias("q")
    )
    rows = pl.concat([held, _idle_by_cause(comp, free)], how="diagonal_relaxed")
    names = card_names(comp)
    return (
        rows.join(names, on="gpu_id", how="left")
        .join(_allocation_info(comp), on="allocation_id", how="left")
        .with_columns(
            *_fleet_charge("card", _origin_id(*(pl.col(k) for k in origin_keys)), pl.col("driver"),
                           _driver_unit(pl.col("driver")), pl.col("gpu_id"), pl.col("card_name"),
                           pl.col("card_type").fill_null("GPU"), GPU_COMPUTE),
            pl.format("{} of {} on {}, split by {}", pl.col("category"), pl.coalesce("card_name", "gpu_id"),
                      pl.col("day"), pl.col("driver")).alias("description"),
            _tags(pool=pl.col("pool"), node=pl.col("node"), accelerator=pl.col("accelerator")).alias("tags"),
            *_holder_columns(pl.col("allocation_id")),
        )
    )


def _idle_by_cause(comp: Computation, free: pl.DataFrame) -> pl.DataFrame:
    """A card-day's unallocated money, split by idle cause in proportion to the idle GPU-hours
    of each cause (their facility energy for energy-driven money); `unallocated` when no idle
    piece names a cause."""
    if free.height == 0:
        return free
    pieces = (
        comp.idle.filter(pl.col("kind") == "unallocated")
        .join(comp.seg.select("s_idx", "day", "gpu_id", "kwh_fac"), on="s_idx", maintain_order="left")
        .group_by("day", "gpu_id", pl.col("cause").alias("idle_cause"), maintain_order=True)
        .agg(pl.col("gpu_hours").sum().alias("hours"),
             (pl.col("kwh_fac") * pl.col("idle_frac")).sum().alias("kwh_fac"),
             pl.col("energy_kwh_gpu").sum().alias("kwh_gpu"))
    )
    f = free.join(pieces, on=["day", "gpu_id"], how="left")
    w = pl.when(pl.col("driver").is_in(ENERGY_DRIVERS)).then(pl.col("kwh_fac")).otherwise(pl.col("hours"))
    keys = ["day", "gpu_id", "category", "driver", "base"]
    total = w.sum().over(keys)
    share = pl.when(total > 0).then(w / total).otherwise(1.0 / pl.len().over(keys))
    return f.with_columns(
        (pl.col("amount") * share.fill_null(1.0)).alias("amount"),
        w.alias("q"),
        pl.col("idle_cause").fill_null("unallocated"),
    )


# ----------------------------------------------------------------------------------- pool


def _pool_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    origin_keys = ["day", "pool", "category", "driver", "base"]
    rows = _sum(m, [*origin_keys, *_HOLDER])
    # The engine charges a pool's idle back by allocated GPU-hours.
    hours = comp.seg.filter(pl.col("allocation_id").is_not_null()).group_by("day", "pool", "allocation_id").agg(
        pl.col("alloc_h").sum().alias("q")
    )
    rows = rows.join(hours, on=["day", "pool", "allocation_id"], how="left").join(
        _allocation_info(comp), on="allocation_id", how="left")
    return rows.with_columns(
        *_fleet_charge("pool", _origin_id(pl.lit("idle"), *(pl.col(k) for k in origin_keys)),
                       pl.col("driver") + pl.lit("+idle_chargeback"), pl.lit(GPU_HOURS), pl.col("pool"),
                       pl.col("pool"), pl.lit("GPU Pool"), GPU_COMPUTE),
        pl.format("{} of idle capacity in pool {} charged back on {} by allocated GPU-hours", pl.col("category"),
                  pl.col("pool"), pl.col("day")).alias("description"),
        _tags(pool=pl.col("pool")).alias("tags"),
        *_holder_columns(pl.col("allocation_id")),
    )


# ----------------------------------------------------------------------------------- model


def _model_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    origin_keys = ["day", "model", "pool", "category", "driver", "base"]
    # The origin's quantity: the driver quantity of the allocations that served the model.
    qcols = sorted(set(DRIVER_QUANTITY.values()))
    per_allocation = comp.seg.filter(pl.col("allocation_id").is_not_null()).group_by("day", "allocation_id").agg(
        pl.col(qcols).sum()
    )
    served = m.select(*origin_keys, "allocation_id").unique().join(
        per_allocation, on=["day", "allocation_id"], how="left",
    ).group_by(origin_keys).agg(_driver_quantity(pl.col("driver")).sum().alias("origin_q"))
    rows = _sum(m, [*origin_keys, *_PARTY]).join(served, on=origin_keys, how="left", nulls_equal=True)
    rows = _with_tokens(comp, rows)
    mode = comp.config.allocation.inference_recharge
    mapped = pl.col("dest") != UNATTRIBUTED
    names = comp.ownership.projects.select("project", "display_name").unique("project")
    return rows.join(names, on="project", how="left").with_columns(
        *_fleet_charge("model", _origin_id(*(pl.col(k) for k in origin_keys)),
                       pl.col("driver") + pl.lit(f"+recharge_by_{mode}"), _driver_unit(pl.col("driver")),
                       pl.col("model"), pl.col("model"), pl.lit("Model Service"), ("Model Inference", "Generative AI")),
        pl.format("{} of serving model {} in pool {} on {}, recharged by {}", pl.col("category"), pl.col("model"),
                  pl.col("pool"), pl.col("day"), pl.lit(mode)).alias("description"),
        _tags(pool=pl.col("pool"), model=pl.col("model")).alias("tags"),
        pl.when(mapped).then(pl.col("project")).alias("allocated_id"),
        pl.when(mapped).then(pl.coalesce("display_name", "project")).alias("allocated_name"),
        pl.when(mapped).then(_tags(tenant=pl.col("tenant"), project=pl.col("project"))).alias("allocated_tags"),
    )


def _with_tokens(comp: Computation, rows: pl.DataFrame) -> pl.DataFrame:
    """The tokens each caller sent the model that day (a mapped project, or an unmapped key)."""
    req = comp.requests
    cols = ("input_tokens", "cached_input_tokens", "output_tokens")
    sums = [pl.col(c).sum() for c in cols]
    owned = req.filter(pl.col("project").is_not_null()).group_by("day", "model", "project").agg(*sums)
    # The callers that map to no project are one line per model (engine: tokens.recharge).
    loose = req.filter(pl.col("project").is_null()).group_by("day", "model").agg(*sums)
    a = rows.filter(pl.col("dest") != UNATTRIBUTED).join(owned, on=["day", "model", "project"], how="left")
    b = rows.filter(pl.col("dest") == UNATTRIBUTED).join(loose, on=["day", "model"], how="left")
    return pl.concat([a, b], how="diagonal_relaxed")


# ----------------------------------------------------------------------------------- cost rows


def _cost_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    """Cost rows not spread over card-time: by project drivers (a split), kept whole as
    unallocated (`unspread`, a split with nothing allocated), or direct (not a split).
    Priced per hour of the cost row's term inside the charge period."""
    if m.height == 0:
        return m
    origin_keys = ["day", "cost_id", "pool", "category", "driver", "base"]
    rows = _sum(m, [*origin_keys, *_PARTY])
    p = comp.period
    costs = comp.bundle["costs"].select(
        "cost_id", pl.col("source").alias("cost_source"),
        pl.max_horizontal(pl.col("start"), pl.lit(p.start)).dt.convert_time_zone("UTC").alias("cs"),
        pl.min_horizontal(pl.col("end"), pl.lit(p.end)).dt.convert_time_zone("UTC").alias("ce"),
    ).unique("cost_id")
    rows = rows.join(costs, on="cost_id", how="left")
    day0, day1 = day_bounds(pl.col("day"), p)
    unspread = pl.col("base") == "unspread"
    # An unspread cost is booked whole on its first day: its charge period is its term.
    span_start = pl.when(unspread).then(pl.col("cs")).otherwise(pl.max_horizontal(day0, pl.col("cs")))
    span_end = pl.when(unspread).then(pl.col("ce")).otherwise(pl.min_horizontal(day1, pl.col("ce")))
    term_h = (span_end - span_start).dt.total_microseconds() / 3.6e9
    split = pl.col("driver").is_not_null()
    allocated = split & (pl.col("dest") == "owner")
    api = pl.col("category") == "api_fees"
    # An api_fees row's source names the API vendor's system (e.g. `openai`); other rows'
    # source only says which alias table spells their owner.
    vendor = pl.when(api).then(pl.coalesce(pl.col("cost_source"), pl.lit(PROVIDER))).otherwise(pl.lit(PROVIDER))
    names = comp.ownership.projects.select("project", "display_name").unique("project")
    return rows.join(names, on="project", how="left").with_columns(
        pl.lit("cost").alias("kind"),
        _origin_id(*(pl.col(k) for k in origin_keys)).alias("origin_id"),
        pl.col("driver").alias("method"),
        split.alias("split"),
        pl.when(term_h > 0).then(term_h).alias("origin_q"),
        pl.lit(HOURS).alias("unit"),
        span_start.alias("span_start"),
        span_end.alias("span_end"),
        pl.col("cost_id").alias("resource_id"),
        pl.col("cost_id").alias("resource_name"),
        pl.when(api).then(pl.lit("Hosted Model API")).otherwise(pl.lit("Cost Record")).alias("resource_type"),
        pl.when(api).then(pl.lit("Hosted Model APIs")).otherwise(pl.lit("GPU Fleet Shared Costs")).alias("service"),
        pl.when(api).then(pl.lit("Generative AI")).otherwise(pl.lit("AI Platforms")).alias("subcategory"),
        pl.col("pool").alias("sub_account"),
        pl.lit(PROVIDER).alias("provider"),
        vendor.alias("publisher"),
        # FOCUS 1.3: a service not deployed on infrastructure (a licence, labour) has no host.
        pl.when(api).then(vendor).otherwise(pl.lit("Not Applicable")).alias("host_provider"),
        pl.lit(False).alias("infrastructure"),
        pl.when(~split).then(pl.format("{}: cost {} charged directly", pl.col("category"), pl.col("cost_id")))
        .when(unspread).then(pl.format("{}: cost {}, no {} in its scope to spread it by", pl.col("category"),
                                       pl.col("cost_id"), pl.col("driver")))
        .otherwise(pl.format("{}: cost {} on {}, split by {}", pl.col("category"), pl.col("cost_id"), pl.col("day"),
                             pl.col("driver"))).alias("description"),
        # A direct cost's owner is the charge's own tag; a split's owners are allocated tags.
        pl.when(split).then(_tags(pool=pl.col("pool")))
        .otherwise(_tags(pool=pl.col("pool"), tenant=pl.col("tenant"), project=pl.col("project"))).alias("tags"),
        pl.when(allocated).then(pl.col("project")).alias("allocated_id"),
        pl.when(allocated).then(pl.coalesce("display_name", "project")).alias("allocated_name"),
        pl.when(allocated).then(_tags(tenant=pl.col("tenant"), project=pl.col("project"))).alias("allocated_tags"),
        pl.when(pl.col("dest") == IDLE).then(pl.lit("unspread")).alias("idle_cause"),
    )


def day_bounds(day: pl.Expr, period) -> tuple[pl.Expr, pl.Expr]:
    """A day of the period's time zone as a UTC [start, end), clipped to the period."""
    start = day.cast(pl.Datetime("us")).dt.replace_time_zone(period.timezone, ambiguous="earliest",
                                                             non_existent="null")
    lo = pl.max_horizontal(start.dt.convert_time_zone("UTC"), pl.lit(period.start).dt.convert_time_zone("UTC"))
    hi = pl.min_horizontal(start.dt.offset_by("1d").dt.convert_time_zone("UTC"),
                           pl.lit(period.end).dt.convert_time_zone("UTC"))
    return lo, hi
