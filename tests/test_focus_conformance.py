"""FOCUS conformance of the written export: each MUST rule of the columns we write, one test.

Run on the sample bundle (fleet-week) and on a generated month (8 cards, 30 days), each
exported as FOCUS 1.2 and 1.3, as CSV and as Parquet, and read back the way a finance tool
reads them (CSV as text). Test names start with the FOCUS section they check:
`attr_<attribute>` (FOCUS 1.2 attributes), `<column>` (FOCUS 1.2 column requirements),
`alloc_<column>` and `split_handling` (the FOCUS 1.3 split cost allocation columns and the
"Data Generator-Calculated Split Cost Allocation Handling" attribute). Sources: FOCUS_Spec
tag v1.2 (specification/columns, specification/attributes) and the 1.3 text of
specification/datasets/cost_and_usage/columns/allocated*.md; rule ids in the docstrings are
those of the FinOps requirements model (model-1.2.json of finopsfoundation/focus_validator,
CAU-... ids of the 1.3 model).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from cost_engine import api
from cost_engine.exporters.focus import (
    ALLOCATION_COLUMNS, EXTENSION_COLUMNS, FOCUS_12_COLUMNS, FOCUS_13_COLUMNS, columns, write_focus,
)
from cost_engine.report import reconciliation
from sample_data.generate import generate_bundle

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"

TIMES = ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd")
NUMBERS = ("BilledCost", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "ListCost",
           "ListUnitPrice", "PricingQuantity")
X_NUMBERS = ("x_EnergyKWh", "x_EnergyKWhFacility", "x_InputTokens", "x_CachedInputTokens", "x_OutputTokens")
# FOCUS dimensions of our rows: an allocated charge must repeat its origin charge's values.
DIMENSIONS = (
    "AvailabilityZone", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd",
    "ChargePeriodStart", "ConsumedUnit", "InvoiceId", "InvoiceIssuerName", "PricingCategory", "PricingUnit",
    "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId",
    "SubAccountId", "SubAccountName", "Tags", "HostProviderName", "ServiceProviderName",
)
SERVICE_CATEGORIES = {
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases", "Developer Tools",
    "Multicloud", "Identity", "Integration", "Internet of Things", "Management and Governance", "Media",
    "Migration", "Mobile", "Networking", "Security", "Storage", "Web", "Other",
}
AI_SUBCATEGORIES = {"AI Platforms", "Bots", "Generative AI", "Machine Learning", "Natural Language Processing",
                    "Other (AI and Machine Learning)"}
PLAIN_NUMBER = re.compile(r"^-?\d+(\.\d+)?(E-?\d+)?$")  # NumericFormat: decimal, or E notation
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
REL = 1e-9


@dataclass
class Export:
    """A written FOCUS file read back: `text` (CSV cells as written, None for Parquet) and
    `frame` (typed), with the computation it came from."""

    dataset: str
    version: str
    fmt: str
    text: pl.DataFrame | None
    frame: pl.DataFrame
    comp: object

    def col(self, name: str) -> str:
        """A 1.3 allocation column under the name this version gives it."""
        return f"x_{name}" if self.version == "1.2" and name in ALLOCATION_COLUMNS else name


@pytest.fixture(scope="module")
def comps(tmp_path_factory):
    month = generate_bundle(tmp_path_factory.mktemp("month") / "b", gpus=8, days=30, seed=11, start="2026-11-01",
                            telemetry_interval_s=600)
    return {"fleet-week": api.run(SAMPLE), "month": api.run(month)}


CASES = [(d, v, f) for d in ("fleet-week", "month") for v in ("1.2", "1.3") for f in ("csv", "parquet")]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def export(request, comps, tmp_path_factory) -> Export:
    dataset, version, fmt = request.param
    comp = comps[dataset]
    path = tmp_path_factory.mktemp("focus") / f"focus.{fmt}"
    write_focus(comp, path, version=version)
    if fmt == "parquet":
        return Export(dataset, version, fmt, None, pl.read_parquet(path), comp)
    text = pl.read_csv(path, infer_schema_length=0)
    typed = text.with_columns(
        *(pl.col(c).str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_zone="UTC") for c in TIMES),
        *(pl.col(c).cast(pl.Float64) for c in NUMBERS + X_NUMBERS),
    )
    return Export(dataset, version, fmt, text, typed, comp)


def _split(e: Export) -> pl.Expr:
    """Rows of a split cost allocation: everything but a direct cost (x_Origin `direct`)."""
    return pl.col("x_Origin") != "direct"


def _json(cell: str) -> dict:
    pairs: list = []
    obj = json.loads(cell, object_pairs_hook=lambda kv: pairs.append([k for k, _ in kv]) or dict(kv))
    assert all(len(keys) == len(set(keys)) for keys in pairs), f"duplicate keys in {cell}"
    return obj


# ------------------------------------------------------------------------------------ attributes


def test_attr_column_handling__pascal_case_ids_x_prefix_focus_columns_first(export):
    """ColumnHandling-A-001/003/010/013: FOCUS columns in PascalCase, custom ones prefixed x_
    and after all FOCUS columns; the version claimed (1.2) has no unprefixed 1.3 column."""
    cols = export.frame.columns
    assert cols == list(columns(export.version))
    focus = set(FOCUS_12_COLUMNS if export.version == "1.2" else FOCUS_13_COLUMNS)
    custom = [c for c in cols if c not in focus]
    assert all(c.startswith("x_") for c in custom)
    assert all(re.fullmatch(r"[A-Z][A-Za-z]+", c) for c in cols if c in focus)
    assert max(cols.index(c) for c in focus) < min(cols.index(c) for c in custom)
    if export.version == "1.2":
        assert not set(cols) & (set(ALLOCATION_COLUMNS) | {"ServiceProviderName", "HostProviderName"})
        assert {f"x_{c}" for c in ALLOCATION_COLUMNS} <= set(cols)
    assert set(EXTENSION_COLUMNS) <= set(cols)


def test_attr_datetime_format__iso8601_utc_with_z(export):
    """DateTimeFormat-A-001..006: UTC, `YYYY-MM-DDTHH:mm:ssZ`."""
    if export.text is not None:
        for c in TIMES:
            assert export.text[c].str.contains(ISO_UTC.pattern).all(), c
    for c in TIMES:
        assert export.frame[c].dtype == pl.Datetime("us", "UTC")


def test_attr_numeric_format__plain_decimals_or_upper_e(export):
    """NumericFormat-A-003/005/009/010: integer, decimal or `mEn`; no lowercase e, no + sign,
    no thousands separator (also for the x_ numeric columns, NumericFormat-A-001)."""
    if export.text is not None:
        for c in NUMBERS + X_NUMBERS:
            cells = export.text[c].drop_nulls()
            bad = cells.filter(~cells.str.contains(PLAIN_NUMBER.pattern))
            assert bad.len() == 0, f"{c}: {bad.head(3).to_list()}"
    for c in NUMBERS:
        assert export.frame[c].dtype == pl.Float64
        assert export.frame[c].is_finite().all()


def test_attr_key_value_format__json_objects_of_scalars(export):
    """KeyValueFormat-A-001..004 for Tags, SkuPriceDetails, AllocatedTags: a JSON object,
    unique keys, values number/string/bool/null, never an object or array."""
    for c in ("Tags", "SkuPriceDetails", export.col("AllocatedTags")):
        for cell in export.frame[c].drop_nulls().unique():
            obj = _json(cell)
            assert isinstance(obj, dict) and obj, cell
            assert all(not isinstance(v, (dict, list)) for v in obj.values()), cell


def test_attr_null_handling__no_empty_strings_or_placeholders(export):
    """NullHandling-A-002: no empty strings, no placeholder standing for null (the old
    `unattributed` sub account)."""
    strings = [c for c, d in export.frame.schema.items() if d == pl.String]
    for c in strings:
        assert (export.frame[c].drop_nulls().str.strip_chars() == "").sum() == 0, c
    assert "unattributed" not in export.frame["SubAccountId"].drop_nulls().to_list()


def test_attr_currency_format__iso_4217(export):
    """CurrencyFormat-A-001, BillingCurrency-C-003/004/006: a three-letter national code."""
    cur = export.frame["BillingCurrency"]
    assert cur.null_count() == 0
    assert set(cur) == {export.comp.period.currency} and re.fullmatch(r"[A-Z]{3}", cur[0])


# ------------------------------------------------------------------------------------ columns


def test_billedcost__not_null_and_sums_to_the_input_cost(export):
    """BilledCost-C-003/004/006 and the reconciliation: every row has a cost in the billing
    currency, the dataset adds up to the report's input cost."""
    f = export.frame
    assert f["BilledCost"].null_count() == 0
    assert f["BilledCost"].sum() == pytest.approx(reconciliation(export.comp)["input_cost"], abs=1e-6)


def test_billingaccount__id_and_name_not_null(export):
    """BillingAccountId-C-001, BillingAccountName-C-003 (names supported)."""
    assert export.frame["BillingAccountId"].null_count() == 0
    assert export.frame["BillingAccountName"].null_count() == 0


def test_billingperiod__not_null_start_inclusive_end_exclusive(export):
    """BillingPeriodStart-C-003/004, BillingPeriodEnd-C-003/004: the report period."""
    p = export.comp.period
    assert set(export.frame["BillingPeriodStart"]) == {p.start}
    assert set(export.frame["BillingPeriodEnd"]) == {p.end}


def test_chargecategory_chargeclass_chargefrequency__allowed_values(export):
    """ChargeCategory-C-002/003, ChargeClass-C-003/005 (no correction rows),
    ChargeFrequency-C-002/003/004, ChargeDescription-C-003 (SHOULD NOT be null)."""
    f = export.frame
    assert set(f["ChargeCategory"]) <= {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
    assert f["ChargeClass"].null_count() == f.height
    assert set(f["ChargeFrequency"]) <= {"One-Time", "Recurring", "Usage-Based"}
    assert f.filter((pl.col("ChargeCategory") == "Purchase") & (pl.col("ChargeFrequency") == "Usage-Based")).height == 0
    assert f["ChargeDescription"].null_count() == 0


def test_chargeperiod__not_null_end_after_start_inside_the_billing_period(export):
    """ChargePeriodStart-C-003/004, ChargePeriodEnd-C-003/004."""
    f = export.frame
    assert f["ChargePeriodStart"].null_count() == 0 and f["ChargePeriodEnd"].null_count() == 0
    assert (f["ChargePeriodEnd"] > f["ChargePeriodStart"]).all()
    assert (f["ChargePeriodStart"] >= f["BillingPeriodStart"]).all()
    assert (f["ChargePeriodEnd"] <= f["BillingPeriodEnd"]).all()


def test_consumedquantity_consumedunit__not_null_on_usage_unit_iff_quantity(export):
    """ConsumedQuantity-C-006/008, ConsumedUnit-C-005/006: usage rows (no corrections) carry a
    quantity and its unit."""
    usage = export.frame.filter(pl.col("ChargeCategory") == "Usage")
    assert usage["ConsumedQuantity"].null_count() == 0
    assert (usage["ConsumedQuantity"] >= 0).all()
    assert (export.frame["ConsumedUnit"].is_null() == export.frame["ConsumedQuantity"].is_null()).all()


def test_costs__effective_list_contracted_not_null(export):
    """EffectiveCost-C-003, ListCost-C-003, ContractedCost-C-003; one price for an internal
    chargeback: all equal to BilledCost."""
    f = export.frame
    for c in ("EffectiveCost", "ListCost", "ContractedCost"):
        assert f[c].null_count() == 0
        assert (f[c] == f["BilledCost"]).all(), c


def test_unitprices__not_null_and_non_negative_on_usage(export):
    """ListUnitPrice-C-005/008, ContractedUnitPrice-C-006/009."""
    usage = export.frame.filter(pl.col("ChargeCategory") == "Usage")
    for c in ("ListUnitPrice", "ContractedUnitPrice"):
        assert usage[c].null_count() == 0, c
        assert (usage[c] >= 0).all(), c


def test_pricingquantity__unit_price_times_quantity_is_the_cost(export):
    """ListCost-C-009, ListUnitPrice-C-010, ContractedCost-C-009, ContractedUnitPrice-C-011,
    PricingQuantity-C-009."""
    f = export.frame
    for price, cost in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")):
        product = f[price] * f["PricingQuantity"]
        err = (product - f[cost]).abs() - REL * f[cost].abs()
        assert (err <= 1e-12).all(), f"{price} x PricingQuantity != {cost}"


def test_pricingquantity_pricingunit_pricingcategory__not_null_on_usage(export):
    """PricingQuantity-C-005/008, PricingUnit-C-005/006, PricingCategory-C-004/007/008."""
    f = export.frame
    usage = f.filter(pl.col("ChargeCategory") == "Usage")
    assert usage["PricingQuantity"].null_count() == 0 and usage["PricingUnit"].null_count() == 0
    assert (f["PricingUnit"].is_null() == f["PricingQuantity"].is_null()).all()
    assert set(usage["PricingCategory"]) == {"Standard"}


def test_provider_publisher_invoiceissuer__not_null(export):
    """ProviderName-C-003, PublisherName-C-003, InvoiceIssuerName-C-003; FOCUS 1.3
    ServiceProviderName and HostProviderName MUST NOT be null."""
    cols = ["ProviderName", "PublisherName", "InvoiceIssuerName"]
    if export.version == "1.3":
        cols += ["ServiceProviderName", "HostProviderName"]
    for c in cols:
        assert export.frame[c].null_count() == 0, c


def test_invoiceid__the_billing_periods_statement(export):
    """InvoiceId-C-001/005/007: every charge is on the period's provisional chargeback
    statement, one id per billing account and period."""
    assert export.frame["InvoiceId"].null_count() == 0
    assert export.frame.select("InvoiceId", "BillingAccountId", "BillingPeriodStart").n_unique() == 1


def test_region_availabilityzone__name_with_id_zone_only_on_infrastructure(export):
    """RegionName-C-004/005, AvailabilityZone-C-003: no location in the bundle, so none is
    written (null, never guessed)."""
    f = export.frame
    assert (f["RegionName"].is_null() == f["RegionId"].is_null()).all()
    assert f["AvailabilityZone"].null_count() == f.height


def test_resource__type_with_id_name_never_the_system_generated_id(export):
    """ResourceName-C-004/006, ResourceType-C-004/005: a card (UUID `GPU-`/`MIG-` id) has a
    human name; name and type are null exactly when the id is."""
    f = export.frame
    assert (f["ResourceType"].is_null() == f["ResourceId"].is_null()).all()
    assert f.filter(pl.col("ResourceId").is_null() & pl.col("ResourceName").is_not_null()).height == 0
    cards = f.filter(pl.col("ResourceId").str.contains(r"^(GPU|MIG)-"))
    assert cards.height > 0
    assert cards["ResourceName"].null_count() == 0
    assert (cards["ResourceName"] != cards["ResourceId"]).all()
    assert f.group_by("ResourceId").agg(pl.col("ResourceType").n_unique())["ResourceType"].max() == 1


def test_service__allowed_category_subcategory_with_one_parent(export):
    """ServiceCategory-C-002/003, ServiceSubcategory-C-002/003/004, ServiceName-C-003/005/008."""
    f = export.frame
    assert set(f["ServiceCategory"]) <= SERVICE_CATEGORIES
    ai = f.filter(pl.col("ServiceCategory") == "AI and Machine Learning")
    assert set(ai["ServiceSubcategory"]) <= AI_SUBCATEGORIES
    assert f["ServiceName"].null_count() == 0 and f["ServiceSubcategory"].null_count() == 0
    per_name = f.group_by("ServiceName").agg(pl.col("ServiceCategory").n_unique(),
                                             pl.col("ServiceSubcategory").n_unique())
    assert per_name["ServiceCategory"].max() == 1 and per_name["ServiceSubcategory"].max() == 1


def test_sku__ids_on_usage_one_parent_meter_and_price_details(export):
    """SkuId-C-005, SkuPriceId-C-005/008, SkuMeter-C-004/005, SkuPriceDetails-C-004/007/017:
    SkuMeter wherever SkuId is, one SkuId and one SkuPriceDetails per SkuPriceId, detail keys
    FOCUS-defined or x_-prefixed."""
    f = export.frame
    usage = f.filter(pl.col("ChargeCategory") == "Usage")
    assert usage["SkuId"].null_count() == 0 and usage["SkuPriceId"].null_count() == 0
    assert (f["SkuMeter"].is_null() == f["SkuId"].is_null()).all()
    per_price = f.group_by("SkuPriceId").agg(pl.col("SkuId").n_unique(), pl.col("SkuPriceDetails").n_unique(),
                                            pl.col("PricingUnit").n_unique())
    assert per_price.select(pl.max_horizontal(pl.exclude("SkuPriceId")).max()).item() == 1
    assert f.filter(pl.col("SkuPriceId").is_null() & pl.col("SkuPriceDetails").is_not_null()).height == 0
    for cell in f["SkuPriceDetails"].drop_nulls().unique():
        assert all(k.startswith("x_") for k in _json(cell)), cell


def test_subaccount__name_with_id(export):
    """SubAccountName-C-004/005; SubAccountId (the pool) is a dimension of the resource, never
    the chargeback owner."""
    f = export.frame
    assert (f["SubAccountName"].is_null() == f["SubAccountId"].is_null()).all()
    pools = set(export.comp.ledger.cards["pool"].drop_nulls()) | set(export.comp.bundle["costs"]["pool"].drop_nulls())
    assert set(f["SubAccountId"].drop_nulls()) <= pools


def test_tags__data_generator_keys_prefixed(export):
    """Tags-C-001/012: key-value, our (data-generator-defined) keys carry the documented
    `ailedger/` prefix; AllocatedTags likewise (FOCUS 1.3)."""
    for c in ("Tags", export.col("AllocatedTags")):
        for cell in export.frame[c].drop_nulls().unique():
            assert all(k.startswith("ailedger/") for k in _json(cell)), cell


# ------------------------------------------------------------------------------------ 1.3 allocation


def test_alloc_allocatedmethodid__set_exactly_on_split_rows(export):
    """AllocatedMethodId: MUST be null when a charge is not a split cost allocation, MUST NOT
    be null when it is; AllocatedMethodDetails null when not split (CAU-AllocatedMethodDetails-C-005)
    and set on every split row (C-006, SHOULD NOT be null)."""
    f = export.frame.with_columns(_split(export).alias("split"))
    for c in ("AllocatedMethodId", "AllocatedMethodDetails"):
        col = export.col(c)
        assert (f[col].is_not_null() == f["split"]).all(), col
    assert f["split"].any()


def test_alloc_allocatedmethoddetails__elements_with_numeric_ratio(export):
    """CAU-AllocatedMethodDetailsObject-O-001/002/009/012/013 and the object schema: a JSON
    object whose `Elements` is an array of objects, each with a numeric AllocatedRatio in
    [0, 1] written as a plain decimal; UsageUnit present whenever UsageQuantity is; other
    keys x_-prefixed."""
    col = export.col("AllocatedMethodDetails")
    for cell in export.frame[col].drop_nulls():
        numbers = re.findall(r'":(-?[0-9][^,}\]]*)', cell)
        assert numbers and all(PLAIN_NUMBER.fullmatch(n) for n in numbers), cell
        obj = _json(cell)
        assert set(obj) == {"Elements"} and isinstance(obj["Elements"], list) and obj["Elements"]
        for el in obj["Elements"]:
            assert isinstance(el, dict)
            assert isinstance(el["AllocatedRatio"], float) and 0 <= el["AllocatedRatio"] <= 1 + 1e-12
            assert "UsageQuantity" not in el or "UsageUnit" in el
            assert all(k in ("AllocatedRatio", "UsageUnit", "UsageQuantity") or k.startswith("x_") for k in el)


def test_alloc_allocatedresourceid__null_exactly_on_unallocated_portions(export):
    """AllocatedResourceId MUST be null for the unallocated portion of an origin charge (idle
    capacity, money of callers no alias maps, costs nothing could carry) and MUST NOT be null
    for an allocated portion; AllocatedResourceName null exactly when the id is."""
    f = export.frame.filter(_split(export))
    rid, name = export.col("AllocatedResourceId"), export.col("AllocatedResourceName")
    unallocated = pl.col("x_IdleCause").is_not_null() | (
        pl.col("x_UnattributedKey").is_not_null() & ~pl.col("ResourceType").str.starts_with("GPU"))
    assert f.filter(unallocated)[rid].null_count() == f.filter(unallocated).height
    assert f.filter(~unallocated)[rid].null_count() == 0
    assert (f[name].is_null() == f[rid].is_null()).all()
    assert export.frame.filter(~_split(export))[rid].null_count() == export.frame.filter(~_split(export)).height


def test_alloc_allocatedtags__null_unless_split_and_never_repeating_tags(export):
    """AllocatedTags MUST be null when the charge is not split, MUST NOT include tags already
    present in Tags."""
    f = export.frame
    col = export.col("AllocatedTags")
    assert f.filter(~_split(export))[col].null_count() == f.filter(~_split(export)).height
    both = f.filter(pl.col(col).is_not_null() & pl.col("Tags").is_not_null()).select("Tags", col).unique()
    for tags, alloc in both.iter_rows():
        assert not set(_json(tags)) & set(_json(alloc)), (tags, alloc)


def test_split_handling__dimensions_and_unit_prices_match_the_origin(export):
    """Split Cost Allocation Handling: every allocated charge repeats its origin charge's
    dimensions (SubAccountId, Tags, ResourceId, SKU, ...) and non-summable metrics (unit
    prices)."""
    f = export.frame.filter(_split(export))
    dims = [c for c in DIMENSIONS if c in f.columns]
    per = f.group_by("x_OriginChargeId").agg(
        *(pl.col(c).n_unique() for c in dims), pl.col("ListUnitPrice").n_unique(),
        pl.col("ContractedUnitPrice").n_unique(),
    )
    worst = per.select(pl.exclude("x_OriginChargeId").max())
    assert all(v == 1 for v in worst.row(0)), {k: v for k, v in worst.to_dicts()[0].items() if v != 1}
    assert per.height > 100  # many origins, many of them split in several rows
    assert f.height > per.height


def test_split_rows_sum_to_the_origin_cost_and_ratios_to_one(export):
    """Split Cost Allocation Handling, summable metrics, and CAU-AllocatedMethodDetailsObject-O-014:
    the rows of every origin charge add up to it (cost = unit price x the rows' quantity,
    each row's cost its ratio of the origin) and their AllocatedRatio values sum to 1. A card's
    origin charge is also checked against the engine's own money: what the card cost that day
    in that category, before any recharge or idle chargeback."""
    col = export.col("AllocatedMethodDetails")
    f = export.frame.filter(_split(export)).with_columns(
        pl.col(col).map_elements(lambda s: float(sum(e["AllocatedRatio"] for e in json.loads(s)["Elements"])),
                                 return_dtype=pl.Float64).alias("ratio"),
    )
    per = f.group_by("x_OriginChargeId").agg(
        pl.col("ratio").sum(), pl.col("BilledCost").sum().alias("cost"), pl.col("PricingQuantity").sum().alias("q"),
        pl.col("ListUnitPrice").first().alias("price"),
    )
    assert ((per["ratio"] - 1).abs() < 1e-9).all()
    assert ((per["cost"] - per["price"] * per["q"]).abs() <= REL * per["cost"].abs() + 1e-12).all()
    share = f.join(per.select("x_OriginChargeId", "cost"), on="x_OriginChargeId").filter(pl.col("cost") != 0)
    assert ((share["ratio"] - share["BilledCost"] / share["cost"]).abs() < 1e-9).all()

    m = export.comp.money
    cards = m.filter(pl.col("gpu_id").is_not_null() & ~pl.col("origin").str.contains("+", literal=True))
    truth = cards.group_by("day", "gpu_id", "category", "driver", "origin").agg(pl.col("amount").sum())
    mine = f.filter(pl.col("ResourceId").is_in(cards["gpu_id"].unique().implode())
                    & ~pl.col("x_Origin").str.contains("+", literal=True)).group_by("x_OriginChargeId").agg(
        pl.col("BilledCost").sum())
    assert mine.height == truth.height
    assert mine["BilledCost"].sort().to_list() == pytest.approx(truth["amount"].sort().to_list(), rel=1e-9, abs=1e-12)
