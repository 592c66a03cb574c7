"""The allocated costs as a FOCUS 1.2 cost-and-usage dataset (plus the 1.3 allocation columns).

    from cost_engine.exporters.focus import focus_frame, write_focus
    frame = focus_frame(comp)            # one row per charge, see below
    write_focus(comp, "costs.csv")       # or .parquet

Built from `Computation.money` (where every dollar landed) and `Computation.seg` (the
card-time ledger), so the export sums to the report's reconciliation input cost: every
money row goes into exactly one charge row.

Charge rows, one per
- (day, tenant, project, allocation, category, method): card-time of one allocation
  (ResourceId = the card, AllocatedResourceId = the allocation), GPU-hours as quantity;
- (day, tenant, project, model, category, method): model cost recharged onto the projects
  that sent its requests (ResourceId = the model), tokens as quantity;
- (day, pool, category, idle cause): unallocated idle capacity, SubAccountId null, with
  x_IdleCause (no_demand, quota, fragmentation, maintenance, degraded_hardware; `unspread`
  for a cost no card-time could carry);
- (day, tenant, project, cost row, category): direct costs and costs spread by project
  drivers (tokens, requests, shares, even), no quantity.
Money whose owner key maps to no project lands on rows with SubAccountId `unattributed`
and x_UnattributedKey `source:key`.

Costs: an internal chargeback has one price, so BilledCost = EffectiveCost = ListCost =
ContractedCost (the unit prices are the cost over the pricing quantity).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ..allocation import driver_of
from ..contract import IDLE, UNATTRIBUTED
from ..engine import Computation

SERVICE_CATEGORY = "AI and Machine Learning"
PROVIDER = "Internal GPU fleet"
GPU_HOURS = "GPU-Hours"
TOKENS = "Tokens"

# FOCUS 1.2 columns written (mandatory ones, and the conditional ones that apply), then the
# FOCUS 1.3 allocation columns, then the x_ extensions.
FOCUS_COLUMNS = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodStart",
    "BillingPeriodEnd", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodStart", "ChargePeriodEnd", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId",
    "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)
ALLOCATION_COLUMNS = (
    "AllocatedMethodId", "AllocatedMethodDetails", "AllocatedResourceId", "AllocatedResourceName", "AllocatedTags",
)
EXTENSION_COLUMNS = (
    "x_IdleCause", "x_EnergyKWh", "x_EnergyKWhFacility", "x_InputTokens", "x_CachedInputTokens", "x_OutputTokens",
    "x_Category", "x_Origin", "x_Tenant", "x_Project", "x_Model", "x_Pool", "x_UnattributedKey",
)
COLUMNS = FOCUS_COLUMNS + ALLOCATION_COLUMNS + EXTENSION_COLUMNS
# Columns FOCUS makes mandatory in every dataset (the checks in tests and `validate`).
MANDATORY = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodStart",
    "BillingPeriodEnd", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodStart",
    "ChargePeriodEnd", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName", "SubAccountId", "Tags",
    "ResourceId", "ConsumedQuantity", "ConsumedUnit",
)

# What the row builders may leave out (filled with nulls after they are put together).
_STRING_PARTS = ("model", "workload", "pool", "owner_key", "job_id", "allocated_id", "allocated_name", "idle_cause",
                 "unit")
_NUMBER_PARTS = ("quantity", "kwh_gpu", "kwh_fac", "input_tokens", "cached_input_tokens", "output_tokens")
_KEYS_COMMON = ["day", "dest", "tenant", "project", "u_source", "u_key", "category", "method", "base_origin", "provider"]


def focus_frame(comp: Computation, *, billing_account: str = "gpu-fleet") -> pl.DataFrame:
    """One FOCUS row per charge (see the module doc); sums to the reconciliation input cost."""
    money = _with_method(comp)
    is_idle = pl.col("dest") == IDLE
    is_recharge = pl.col("origin").str.contains("+recharge", literal=True)
    has_alloc = pl.col("allocation_id").is_not_null()

    parts = [
        _idle_rows(comp, money.filter(is_idle)),
        _recharge_rows(comp, money.filter(~is_idle & is_recharge)),
        _allocation_rows(comp, money.filter(~is_idle & ~is_recharge & has_alloc)),
        _other_rows(money.filter(~is_idle & ~is_recharge & ~has_alloc)),
    ]
    parts = [p for p in parts if p.height]
    if not parts:
        return pl.DataFrame(schema=_schema())
    rows = pl.concat(parts, how="diagonal_relaxed")
    rows = rows.with_columns(pl.lit(None, pl.String).alias(c) for c in _STRING_PARTS if c not in rows.columns)
    rows = rows.with_columns(pl.lit(None, pl.Float64).alias(c) for c in _NUMBER_PARTS if c not in rows.columns)

    p = comp.period
    day_start = pl.col("day").cast(pl.Datetime("us")).dt.replace_time_zone(p.timezone, ambiguous="earliest",
                                                                           non_existent="null")
    start = pl.max_horizontal(day_start.dt.convert_time_zone("UTC"), pl.lit(p.start).dt.convert_time_zone("UTC"))
    end = pl.min_horizontal(day_start.dt.offset_by("1d").dt.convert_time_zone("UTC"),
                            pl.lit(p.end).dt.convert_time_zone("UTC"))
    cost = pl.col("amount")
    unit_price = pl.when(pl.col("quantity") > 0).then(cost / pl.col("quantity"))
    sub = (pl.when(pl.col("dest") == UNATTRIBUTED).then(pl.lit("unattributed"))
           .when(pl.col("dest") == IDLE).then(pl.lit(None, pl.String)).otherwise(pl.col("tenant")))
    tags = pl.struct(
        pl.col("tenant"), pl.col("project"), pl.col("model"), pl.col("pool"), pl.col("workload"),
    ).struct.json_encode()
    alloc_tags = pl.when(pl.col("method").is_not_null()).then(
        pl.struct(pl.col("project"), pl.col("tenant"), pl.col("owner_key"), pl.col("job_id")).struct.json_encode()
    )
    out = rows.with_columns(
        pl.col("day").fill_null(p.start.date()),
    ).select(
        cost.alias("BilledCost"),
        pl.lit(billing_account).alias("BillingAccountId"),
        pl.lit("GPU fleet chargeback").alias("BillingAccountName"),
        pl.lit(p.currency).alias("BillingCurrency"),
        pl.lit(p.start).dt.convert_time_zone("UTC").alias("BillingPeriodStart"),
        pl.lit(p.end).dt.convert_time_zone("UTC").alias("BillingPeriodEnd"),
        pl.lit("Usage").alias("ChargeCategory"),
        pl.lit(None, pl.String).alias("ChargeClass"),
        pl.col("description").alias("ChargeDescription"),
        pl.lit("Usage-Based").alias("ChargeFrequency"),
        start.alias("ChargePeriodStart"),
        end.alias("ChargePeriodEnd"),
        pl.col("quantity").alias("ConsumedQuantity"),
        pl.col("unit").alias("ConsumedUnit"),
        cost.alias("ContractedCost"),
        unit_price.alias("ContractedUnitPrice"),
        cost.alias("EffectiveCost"),
        pl.col("provider").alias("InvoiceIssuerName"),
        cost.alias("ListCost"),
        unit_price.alias("ListUnitPrice"),
        pl.lit("Standard").alias("PricingCategory"),
        pl.col("quantity").alias("PricingQuantity"),
        pl.col("unit").alias("PricingUnit"),
        pl.col("provider").alias("ProviderName"),
        pl.col("provider").alias("PublisherName"),
        pl.lit(None, pl.String).alias("RegionId"),
        pl.lit(None, pl.String).alias("RegionName"),
        pl.col("resource_id").alias("ResourceId"),
        pl.col("resource_name").alias("ResourceName"),
        pl.col("resource_type").alias("ResourceType"),
        pl.lit(SERVICE_CATEGORY).alias("ServiceCategory"),
        pl.col("service").alias("ServiceName"),
        pl.col("subcategory").alias("ServiceSubcategory"),
        pl.col("category").alias("SkuId"),
        pl.concat_str([pl.col("category"), pl.col("method").fill_null("direct")], separator=":").alias("SkuPriceId"),
        sub.alias("SubAccountId"),
        sub.alias("SubAccountName"),
        tags.alias("Tags"),
        pl.col("method").alias("AllocatedMethodId"),
        pl.when(pl.col("method").is_not_null())
        .then(pl.struct(pl.col("method").alias("driver"), pl.col("origin_detail").alias("origin")).struct.json_encode())
        .alias("AllocatedMethodDetails"),
        pl.when(pl.col("method").is_not_null()).then(pl.col("allocated_id")).alias("AllocatedResourceId"),
        pl.when(pl.col("method").is_not_null()).then(pl.col("allocated_name")).alias("AllocatedResourceName"),
        alloc_tags.alias("AllocatedTags"),
        pl.col("idle_cause").alias("x_IdleCause"),
        pl.col("kwh_gpu").alias("x_EnergyKWh"),
        pl.col("kwh_fac").alias("x_EnergyKWhFacility"),
        pl.col("input_tokens").alias("x_InputTokens"),
        pl.col("cached_input_tokens").alias("x_CachedInputTokens"),
        pl.col("output_tokens").alias("x_OutputTokens"),
        pl.col("category").alias("x_Category"),
        pl.col("origin_detail").alias("x_Origin"),
        pl.col("tenant").alias("x_Tenant"),
        pl.col("project").alias("x_Project"),
        pl.col("model").alias("x_Model"),
        pl.col("pool").alias("x_Pool"),
        pl.when(pl.col("dest") == UNATTRIBUTED)
        .then(pl.concat_str([pl.col("u_source").fill_null(""), pl.col("u_key").fill_null("")], separator=":"))
        .alias("x_UnattributedKey"),
    )
    out = out.cast(_schema(), strict=False)
    return out.sort("ChargePeriodStart", "SubAccountId", "x_Project", "ResourceId", "x_Category",
                    nulls_last=True, maintain_order=True)


def _schema() -> pl.Schema:
    ts = pl.Datetime("us", "UTC")
    floats = {"BilledCost", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "ListCost",
              "ListUnitPrice", "PricingQuantity", "x_EnergyKWh", "x_EnergyKWhFacility"}
    ints = {"x_InputTokens", "x_CachedInputTokens", "x_OutputTokens"}
    times = {"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"}
    return pl.Schema({c: ts if c in times else pl.Float64 if c in floats else pl.Int64 if c in ints else pl.String
                      for c in COLUMNS})


def _with_method(comp: Computation) -> pl.DataFrame:
    """Money rows with the allocation method (driver) and provider of their cost row."""
    costs = comp.bundle["costs"]
    cost_info = costs.select(
        "cost_id", driver_of(comp.config).alias("drv"), pl.col("source").alias("cost_source")
    ).unique("cost_id")
    # Every money row carries the driver it was spread by; direct costs have none.
    m = comp.money.join(cost_info, on="cost_id", how="left").with_columns(pl.coalesce("driver", "drv").alias("drv"))
    base = pl.col("origin").str.replace(r"\+.*$", "")
    method = (
        pl.when(base == "unspread").then(pl.lit("unspread"))
        .when(base.is_in(["rate", "energy", "cost"])).then(pl.col("drv"))
        .otherwise(pl.lit(None, pl.String))  # direct: not a split allocation
    )
    mode = comp.config.allocation.inference_recharge
    method = (
        pl.when(pl.col("origin").str.contains("+recharge", literal=True))
        .then(pl.concat_str([method.fill_null("direct"), pl.lit(f"+recharge_by_{mode}")]))
        .when(pl.col("origin").str.contains("+idle", literal=True))
        .then(pl.concat_str([method.fill_null("direct"), pl.lit("+idle_chargeback")]))
        .otherwise(method)
    )
    return m.with_columns(
        method.alias("method"),
        base.alias("base_origin"),
        pl.coalesce(pl.col("cost_source"), pl.lit(PROVIDER)).alias("provider"),
    )


def _sum(keys: list[str], frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by(keys, maintain_order=True).agg(
        pl.col("amount").sum(),
        pl.col("origin").unique().sort().str.join("|").alias("origin_detail"),
    )


def _idle_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    pieces = comp.idle.filter(pl.col("kind") == "unallocated").select("s_idx", "cause", "idle_frac")
    m = m.join(pieces, on="s_idx", how="left").with_columns(
        (pl.col("amount") * pl.col("idle_frac").fill_null(1.0)).alias("amount"),
        pl.when(pl.col("s_idx").is_null()).then(pl.lit("unspread"))
        .otherwise(pl.col("cause").fill_null("unallocated")).alias("idle_cause"),
    )
    keys = [*_KEYS_COMMON, "pool", "idle_cause"]
    rows = _sum(keys, m)
    q = (
        comp.idle.filter(pl.col("kind") == "unallocated")
        .join(comp.seg.select("s_idx", "day", "pool", "kwh_gpu", "kwh_fac"), on="s_idx")
        .group_by("day", "pool", pl.col("cause").alias("idle_cause"))
        .agg(pl.col("gpu_hours").sum().alias("quantity"),
             (pl.col("kwh_gpu") * pl.col("idle_frac")).sum().alias("kwh_gpu"),
             (pl.col("kwh_fac") * pl.col("idle_frac")).sum().alias("kwh_fac"))
    )
    rows = rows.join(q, on=["day", "pool", "idle_cause"], how="left", nulls_equal=True)
    return rows.with_columns(
        pl.when(pl.col("quantity").is_not_null()).then(pl.lit(GPU_HOURS)).alias("unit"),
        pl.col("pool").alias("resource_id"),
        pl.col("pool").alias("resource_name"),
        pl.lit("GPU Pool").alias("resource_type"),
        pl.lit("GPU Compute").alias("service"),
        pl.lit("AI Platforms").alias("subcategory"),
        pl.format("{}: unallocated capacity in pool {} ({})", pl.col("category"), pl.col("pool").fill_null("(fleet)"),
                  pl.col("idle_cause")).alias("description"),
    )


def _recharge_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    keys = [*_KEYS_COMMON, "model"]
    rows = _sum(keys, m)
    req = comp.requests
    sums = [pl.col(c).sum() for c in ("input_tokens", "cached_input_tokens", "output_tokens")]
    owned = req.filter(pl.col("project").is_not_null()).group_by("day", "model", "project").agg(*sums)
    loose = req.filter(pl.col("project").is_null()).group_by(
        "day", "model", pl.col("source").alias("u_source"), pl.col("owner").alias("u_key")).agg(*sums)
    a = rows.filter(pl.col("dest") != UNATTRIBUTED).join(owned, on=["day", "model", "project"], how="left")
    b = rows.filter(pl.col("dest") == UNATTRIBUTED).join(loose, on=["day", "model", "u_source", "u_key"], how="left")
    rows = pl.concat([a, b], how="diagonal_relaxed")
    tokens = pl.col("input_tokens") + pl.col("cached_input_tokens") + pl.col("output_tokens")
    return rows.with_columns(
        tokens.cast(pl.Float64).alias("quantity"),
        pl.when(tokens.is_not_null()).then(pl.lit(TOKENS)).alias("unit"),
        pl.col("model").alias("resource_id"),
        pl.col("model").alias("resource_name"),
        pl.lit("Model Service").alias("resource_type"),
        pl.lit("Model Inference").alias("service"),
        pl.lit("Generative AI").alias("subcategory"),
        pl.col("model").alias("allocated_id"),
        pl.col("project").alias("allocated_name"),
        pl.coalesce(pl.col("u_key"), pl.col("project")).alias("owner_key"),
        pl.format("{}: model {} recharged by tokens sent", pl.col("category"), pl.col("model")).alias("description"),
    )


def _allocation_rows(comp: Computation, m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    keys = [*_KEYS_COMMON, "allocation_id", "gpu_id", "pool", "model", "workload"]
    rows = _sum(keys, m)
    q = comp.seg.filter(pl.col("allocation_id").is_not_null()).group_by("day", "allocation_id").agg(
        pl.col("alloc_h").sum().alias("quantity"), pl.col("kwh_gpu").sum(), pl.col("kwh_fac").sum(),
    )
    info = comp.allocations.select("allocation_id", "job_id", pl.col("owner").alias("owner_key")).unique("allocation_id")
    rows = rows.join(q, on=["day", "allocation_id"], how="left").join(info, on="allocation_id", how="left")
    return rows.with_columns(
        pl.when(pl.col("quantity").is_not_null()).then(pl.lit(GPU_HOURS)).alias("unit"),
        pl.col("gpu_id").alias("resource_id"),
        pl.col("gpu_id").alias("resource_name"),
        pl.lit("GPU").alias("resource_type"),
        pl.lit("GPU Compute").alias("service"),
        pl.lit("AI Platforms").alias("subcategory"),
        pl.col("allocation_id").alias("allocated_id"),
        pl.coalesce(pl.col("job_id"), pl.col("allocation_id")).alias("allocated_name"),
        pl.format("{}: card-time of allocation {} on {}", pl.col("category"), pl.col("allocation_id"),
                  pl.col("gpu_id")).alias("description"),
    )


def _other_rows(m: pl.DataFrame) -> pl.DataFrame:
    if m.height == 0:
        return m
    keys = [*_KEYS_COMMON, "pool", "cost_id"]
    rows = _sum(keys, m)
    api = pl.col("category") == "api_fees"
    return rows.with_columns(
        pl.lit(None, pl.Float64).alias("quantity"),
        pl.lit(None, pl.String).alias("unit"),
        pl.col("cost_id").alias("resource_id"),
        pl.col("cost_id").alias("resource_name"),
        pl.when(api).then(pl.lit("Hosted Model API")).otherwise(pl.lit("Cost Record")).alias("resource_type"),
        pl.when(api).then(pl.lit("Hosted Model APIs")).otherwise(pl.lit("GPU Fleet Shared Costs")).alias("service"),
        pl.when(api).then(pl.lit("Generative AI")).otherwise(pl.lit("AI Platforms")).alias("subcategory"),
        pl.col("project").alias("allocated_id"),
        pl.col("project").alias("allocated_name"),
        pl.coalesce(pl.col("u_key"), pl.col("project")).alias("owner_key"),
        pl.format("{}: cost {}", pl.col("category"), pl.col("cost_id").fill_null("(measured)")).alias("description"),
    )


def write_focus(comp: Computation, path: str | Path) -> pl.DataFrame:
    """Write the FOCUS rows as CSV (timestamps `YYYY-MM-DDTHH:MM:SSZ`) or Parquet; returns them."""
    p = Path(path)
    frame = focus_frame(comp)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix.lower() == ".parquet":
        frame.write_parquet(p)
    elif p.suffix.lower() == ".csv":
        frame.write_csv(p, datetime_format="%Y-%m-%dT%H:%M:%SZ")
    else:
        raise ValueError(f"{p.name}: FOCUS export writes .csv or .parquet")
    return frame


def check(frame: pl.DataFrame) -> list[str]:
    """Problems with a FOCUS frame: missing mandatory columns, nulls where FOCUS forbids them."""
    problems = [f"missing column {c}" for c in MANDATORY if c not in frame.columns]
    for c in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency", "ChargeCategory",
              "ChargePeriodStart", "ChargePeriodEnd", "ServiceCategory", "ServiceName", "ProviderName"):
        if c in frame.columns and frame[c].null_count():
            problems.append(f"{c} has {frame[c].null_count()} null values")
    if "ChargePeriodStart" in frame.columns and frame.height:
        bad = frame.filter(pl.col("ChargePeriodEnd") <= pl.col("ChargePeriodStart")).height
        if bad:
            problems.append(f"{bad} rows end before they start")
    return problems
