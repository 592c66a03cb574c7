"""The allocated costs as a FOCUS cost-and-usage dataset, version 1.2 or 1.3.

    from cost_engine.exporters.focus import focus_frame, write_focus
    frame = focus_frame(comp, version="1.3")      # one row per allocated charge
    write_focus(comp, "costs.csv", version="1.2")  # or .parquet

Rows are the split cost allocation of `focus_charges`: each origin charge (a card's cost of
one category on one day, a model's serving cost, a pool's idle chargeback, a cost row's day)
cut into allocated charges that keep the origin's dimensions and unit price. BilledCost is
the money of each row, so the dataset sums to the report's reconciliation input cost.

Versions: "1.3" writes the FOCUS 1.3 allocation columns (AllocatedMethodId, ...) and the
1.3 provider columns (ServiceProviderName, HostProviderName). "1.2" writes the same rows as a
clean FOCUS 1.2 dataset: the columns 1.2 does not define are kept under an `x_` prefix
(x_AllocatedMethodId, ...) or left out (the 1.3 provider columns repeat ProviderName).

An internal chargeback has one price, so BilledCost = EffectiveCost = ListCost =
ContractedCost, and the unit prices are the origin charge's cost over its quantity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..contract import UNATTRIBUTED
from ..engine import Computation
from . import table_csv
from .focus_charges import METERS, PROVIDER, charges, json_object

VERSIONS = ("1.2", "1.3")
DEFAULT_VERSION = "1.2"
SERVICE_CATEGORY = "AI and Machine Learning"

# FOCUS 1.2 columns we write (mandatory ones, the conditional ones that apply, and the
# recommended AvailabilityZone and InvoiceId), in the spec's alphabetical order.
FOCUS_12_COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName",
    "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId",
    "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)
# Columns FOCUS 1.3 adds that we write: the split cost allocation and the provider split.
ALLOCATION_COLUMNS = (
    "AllocatedMethodDetails", "AllocatedMethodId", "AllocatedResourceId", "AllocatedResourceName", "AllocatedTags",
)
PROVIDER_13_COLUMNS = ("HostProviderName", "ServiceProviderName")
FOCUS_13_COLUMNS = tuple(sorted(FOCUS_12_COLUMNS + ALLOCATION_COLUMNS + PROVIDER_13_COLUMNS))
EXTENSION_COLUMNS = (
    "x_OriginChargeId", "x_IdleCause", "x_UnattributedKey", "x_Tenant", "x_Project", "x_Model", "x_Pool",
    "x_Category", "x_Origin", "x_EnergyKWh", "x_EnergyKWhFacility", "x_InputTokens", "x_CachedInputTokens",
    "x_OutputTokens", "x_DataVersion",
)
# Columns FOCUS makes mandatory in every dataset of that version (`check` and the CLI).
_MANDATORY_12 = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost", "PricingQuantity",
    "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
)
MANDATORY = {"1.2": _MANDATORY_12, "1.3": tuple(sorted(_MANDATORY_12 + PROVIDER_13_COLUMNS))}

_FLOATS = ("BilledCost", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "ListCost",
           "ListUnitPrice", "PricingQuantity", "x_EnergyKWh", "x_EnergyKWhFacility")
_INTS = ("x_InputTokens", "x_CachedInputTokens", "x_OutputTokens", "x_DataVersion")
# Columns a Correction row (a late change of a closed period, docs/close.md) leaves null: it
# moves money, not a priced quantity.
_UNPRICED = ("PricingQuantity", "PricingUnit", "ListUnitPrice", "ContractedUnitPrice")
_TIMES = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")
CSV_DATETIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Location:
    """Where the fleet runs, when the bundle does not say: FOCUS RegionId / RegionName /
    AvailabilityZone of the card, pool and model rows (null otherwise: unknown, not guessed)."""

    region_id: str | None = None
    region_name: str | None = None
    availability_zone: str | None = None


def columns(version: str = DEFAULT_VERSION) -> tuple[str, ...]:
    """The columns of a dataset of that FOCUS version, FOCUS columns first, then x_ columns."""
    _check_version(version)
    if version == "1.3":
        return FOCUS_13_COLUMNS + EXTENSION_COLUMNS
    return FOCUS_12_COLUMNS + EXTENSION_COLUMNS + tuple(f"x_{c}" for c in ALLOCATION_COLUMNS)


def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise ValueError(f"FOCUS version {version!r}: choose one of {', '.join(VERSIONS)}")


def focus_frame(
    comp: Computation,
    *,
    version: str = DEFAULT_VERSION,
    billing_account: str = "gpu-fleet",
    location: Location | None = None,
    data_version: int | None = None,
) -> pl.DataFrame:
    """One FOCUS row per allocated charge (see the module doc); sums to the input cost.
    `data_version`: the store's data version the rows were computed at (x_DataVersion)."""
    _check_version(version)
    loc = location or Location()
    c = charges(comp)
    p = comp.period
    invoice = f"{billing_account}-{p.start:%Y%m%d}-{p.end:%Y%m%d}"
    unit_price = pl.col("origin_amount") / pl.col("origin_q")
    quantity = pl.col("ratio") * pl.col("origin_q")
    sku_price = pl.concat_str([pl.col("category"), pl.lit(":"), _price_key()])
    split = pl.col("split")
    infra = pl.col("infrastructure")
    out = c.select(
        pl.when(infra).then(pl.lit(loc.availability_zone)).alias("AvailabilityZone"),
        pl.col("amount").alias("BilledCost"),
        pl.lit(billing_account).alias("BillingAccountId"),
        pl.lit("GPU fleet chargeback").alias("BillingAccountName"),
        pl.lit(p.currency).alias("BillingCurrency"),
        pl.lit(p.end).dt.convert_time_zone("UTC").alias("BillingPeriodEnd"),
        pl.lit(p.start).dt.convert_time_zone("UTC").alias("BillingPeriodStart"),
        pl.lit("Usage").alias("ChargeCategory"),
        pl.lit(None, pl.String).alias("ChargeClass"),
        pl.col("description").alias("ChargeDescription"),
        pl.lit("Usage-Based").alias("ChargeFrequency"),
        pl.col("span_end").alias("ChargePeriodEnd"),
        pl.col("span_start").alias("ChargePeriodStart"),
        quantity.alias("ConsumedQuantity"),
        pl.col("unit").alias("ConsumedUnit"),
        pl.col("amount").alias("ContractedCost"),
        unit_price.alias("ContractedUnitPrice"),
        pl.col("amount").alias("EffectiveCost"),
        pl.lit(invoice).alias("InvoiceId"),
        # The chargeback statement is issued by the fleet, whoever provided the service.
        pl.lit(PROVIDER).alias("InvoiceIssuerName"),
        pl.col("amount").alias("ListCost"),
        unit_price.alias("ListUnitPrice"),
        pl.lit("Standard").alias("PricingCategory"),
        quantity.alias("PricingQuantity"),
        pl.col("unit").alias("PricingUnit"),
        pl.col("provider").alias("ProviderName"),
        pl.coalesce("publisher", "provider").alias("PublisherName"),
        pl.when(infra).then(pl.lit(loc.region_id)).alias("RegionId"),
        pl.when(infra & (loc.region_id is not None)).then(pl.lit(loc.region_name or loc.region_id)).alias("RegionName"),
        pl.col("resource_id").alias("ResourceId"),
        pl.col("resource_name").alias("ResourceName"),
        pl.col("resource_type").alias("ResourceType"),
        pl.lit(SERVICE_CATEGORY).alias("ServiceCategory"),
        pl.col("service").alias("ServiceName"),
        pl.col("subcategory").alias("ServiceSubcategory"),
        pl.col("category").alias("SkuId"),
        _meter().alias("SkuMeter"),
        json_object({"x_CostCategory": pl.col("category"), "x_PricedBy": _price_key()}).alias("SkuPriceDetails"),
        sku_price.alias("SkuPriceId"),
        pl.col("sub_account").alias("SubAccountId"),
        pl.col("sub_account").alias("SubAccountName"),
        pl.col("tags").alias("Tags"),
        pl.when(split).then(_method_details()).alias("AllocatedMethodDetails"),
        pl.when(split).then(pl.col("method")).alias("AllocatedMethodId"),
        pl.when(split).then(pl.col("allocated_id")).alias("AllocatedResourceId"),
        pl.when(split).then(pl.col("allocated_name")).alias("AllocatedResourceName"),
        pl.when(split).then(pl.col("allocated_tags")).alias("AllocatedTags"),
        pl.col("host_provider").alias("HostProviderName"),
        pl.col("provider").alias("ServiceProviderName"),
        pl.col("origin_id").alias("x_OriginChargeId"),
        pl.col("idle_cause").alias("x_IdleCause"),
        pl.when((pl.col("dest") == UNATTRIBUTED) & pl.col("u_key").is_null())
        # Inference recharged onto callers that map to no project: one line for all their keys
        # (what each key paid is in the report's `unattributed` list).
        .then(pl.lit("(callers that map to no project)"))
        .when(pl.col("dest") == UNATTRIBUTED)
        .then(pl.concat_str([pl.col("u_source").fill_null(""), pl.col("u_key").fill_null("")], separator=":"))
        .alias("x_UnattributedKey"),
        pl.col("tenant").alias("x_Tenant"),
        pl.col("project").alias("x_Project"),
        pl.col("model").alias("x_Model"),
        pl.col("pool").alias("x_Pool"),
        pl.col("category").alias("x_Category"),
        pl.col("origin").alias("x_Origin"),
        pl.col("kwh_gpu").alias("x_EnergyKWh"),
        pl.col("kwh_fac").alias("x_EnergyKWhFacility"),
        pl.col("input_tokens").alias("x_InputTokens"),
        pl.col("cached_input_tokens").alias("x_CachedInputTokens"),
        pl.col("output_tokens").alias("x_OutputTokens"),
        pl.lit(data_version, pl.Int64).alias("x_DataVersion"),
    )
    out = out.sort("ChargePeriodStart", "SubAccountId", "ResourceId", "x_OriginChargeId", "AllocatedResourceId",
                   "x_IdleCause", "x_UnattributedKey", nulls_last=True, maintain_order=True)
    if version == "1.2":
        out = out.drop(PROVIDER_13_COLUMNS).rename({c: f"x_{c}" for c in ALLOCATION_COLUMNS})
    return out.select(columns(version)).cast(_schema(version), strict=False)


def _price_key() -> pl.Expr:
    """What the price is per: the driver for card-time, `term` for cost rows."""
    return pl.when(pl.col("kind") == "cost").then(pl.lit("term")).otherwise(pl.col("driver"))


def _meter() -> pl.Expr:
    return _price_key().replace_strict(METERS, default=None)


def _plain(x: pl.Expr) -> pl.Expr:
    """A number as a plain decimal with at least one decimal digit (FOCUS NumericFormat: no
    lowercase-e exponent; a JSON reader sees a decimal, not an integer)."""
    s = x.cast(pl.Decimal(38, 18), strict=False).cast(pl.String).str.strip_chars_end("0")
    return pl.when(s.str.ends_with(".")).then(s + pl.lit("0")).otherwise(s)


def _method_details() -> pl.Expr:
    """FOCUS 1.3 AllocatedMethodDetails: {"Elements": [{AllocatedRatio, UsageUnit, UsageQuantity}]}:
    the row's share of its origin charge and the driver quantity that set it, where known."""
    usage = pl.when(pl.col("q").is_not_null()).then(
        pl.lit(',"UsageUnit":"') + pl.col("usage_unit") + pl.lit('","UsageQuantity":') + _plain(pl.col("q"))
    ).otherwise(pl.lit(""))
    return pl.lit('{"Elements":[{"AllocatedRatio":') + _plain(pl.col("ratio")) + usage + pl.lit("}]}")


def _schema(version: str) -> pl.Schema:
    ts = pl.Datetime("us", "UTC")
    return pl.Schema({
        c: ts if c in _TIMES else pl.Float64 if c in _FLOATS else pl.Int64 if c in _INTS else pl.String
        for c in columns(version)
    })


def write_focus(
    comp: Computation,
    path: str | Path,
    *,
    version: str = DEFAULT_VERSION,
    location: Location | None = None,
    data_version: int | None = None,
    extra: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Write the FOCUS rows (and `extra` rows after them: close.focus_corrections) as CSV or
    Parquet; returns them. CSV: timestamps
    `YYYY-MM-DDTHH:MM:SSZ`, numbers as plain decimals, text cells guarded against spreadsheet
    formulas by the exporters' CSV guard."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ValueError(f"{p.name}: FOCUS export writes .csv or .parquet")
    frame = focus_frame(comp, version=version, location=location, data_version=data_version)
    if extra is not None and extra.height:
        frame = pl.concat([frame, extra], how="diagonal_relaxed").select(frame.columns).cast(frame.schema)
    p.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        frame.write_parquet(p)
    else:
        p.write_bytes(table_csv(frame, datetime_format=CSV_DATETIME, float_scientific=False))
    return frame


def check(frame: pl.DataFrame, version: str = DEFAULT_VERSION) -> list[str]:
    """Problems with a FOCUS frame: missing mandatory columns, nulls where FOCUS forbids them,
    charge periods that end before they start."""
    _check_version(version)
    problems = [f"missing column {c}" for c in MANDATORY[version] if c not in frame.columns]
    for c in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency", "ChargeCategory",
              "ChargePeriodStart", "ChargePeriodEnd", "ServiceCategory", "ServiceName", "ProviderName",
              "PricingQuantity", "PricingUnit", "ListUnitPrice", "ContractedUnitPrice"):
        rows = frame.filter(pl.col("ChargeClass").fill_null("") != "Correction") if (
            c in _UNPRICED and "ChargeClass" in frame.columns) else frame
        if c in rows.columns and rows[c].null_count():
            problems.append(f"{c} has {rows[c].null_count()} null values")
    if "ChargePeriodStart" in frame.columns and frame.height:
        bad = frame.filter(pl.col("ChargePeriodEnd") <= pl.col("ChargePeriodStart")).height
        if bad:
            problems.append(f"{bad} rows end before they start")
    return problems
