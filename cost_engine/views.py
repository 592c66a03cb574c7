"""Dashboard views: every table a page shows, as `(comp, filters, ...) -> pl.DataFrame`.

Pages lay out; this module computes. Each view narrows the Computation with `Filters`
(pool, accelerator, workload, tenant) and then reuses the report's own aggregations
(`report.totals`, `report.owner_table`, `report.trend`, `report.idle_detail`, ...), so an
unfiltered view gives exactly the report's figures.

How a filter narrows each frame (a row lacking the filtered dimension does not pass):
- card-time (segments, idle pieces, telemetry samples): the card's pool and accelerator,
  the holder's workload and tenant; with a workload or tenant filter, unallocated card-time
  drops out (it has neither), so "available" becomes that workload's or tenant's held time;
- money rows: the card's pool and accelerator (a row spread without a card, e.g. a fleet-wide
  or direct cost, passes a pool filter by its own pool and never passes an accelerator filter),
  the row's workload and tenant (idle and unattributed money have no tenant);
- requests: the tenant that sent them; pool and accelerator through the models served on
  those cards; a workload filter keeps them only when it includes `inference`.

Nothing here imports streamlit: the dashboard, the exporters and the tests call it alike.

This module is the views' public face; they live by page in views_filters, views_headline,
views_rankings, views_records, views_idle, views_energy, views_data and views_rules.
"""

from __future__ import annotations

from .views_filters import (
    apply_filters,
    filter_options,
    Filters,
    LACKS,
    left_out,
    MAX_PAGE_SIZE,
    NO_FILTERS,
    TIMELINE_POINTS,
    TOKEN_COLS,
)
from .views_headline import (
    by_category,
    format_value,
    gaps,
    kpi_cards,
    reconciliation,
    totals,
    trend,
    UNKNOWN,
)
from .views_rankings import (
    project_jobs,
    project_models,
    project_services,
    rankings,
    RankLevel,
    SORTS,
    top_tenants,
)
from .views_records import (
    lineage_summary,
    records,
    RecordsPage,
    RecordTable,
    source_is_store,
)
from .views_idle import (
    card_allocations,
    card_label,
    card_timeline,
    idle_allocations,
    idle_backlog,
    idle_by_cause,
    idle_by_pool,
    idle_cards,
    idle_daily,
    idle_detail,
    idle_summary,
    idle_this_week,
    week_start,
)
from .views_energy import (
    energy_daily,
    energy_totals,
    model_energy,
    power_cap_summary,
    power_profile,
    unit_economics,
    unit_totals,
)
from .views_data import (
    alias_table,
    projects,
    rejections,
    telemetry_coverage,
    telemetry_rows,
    unattributed,
    validation_summary,
)
from .views_rules import (
    compare_rules,
    compare_totals,
    config_with,
    drivers_table,
    period_config,
    period_days,
)

__all__ = [
    "apply_filters",
    "filter_options",
    "Filters",
    "LACKS",
    "left_out",
    "MAX_PAGE_SIZE",
    "NO_FILTERS",
    "TIMELINE_POINTS",
    "TOKEN_COLS",
    "by_category",
    "format_value",
    "gaps",
    "kpi_cards",
    "reconciliation",
    "totals",
    "trend",
    "UNKNOWN",
    "project_jobs",
    "project_models",
    "project_services",
    "rankings",
    "RankLevel",
    "SORTS",
    "top_tenants",
    "lineage_summary",
    "records",
    "RecordsPage",
    "RecordTable",
    "source_is_store",
    "card_allocations",
    "card_label",
    "card_timeline",
    "idle_allocations",
    "idle_backlog",
    "idle_by_cause",
    "idle_by_pool",
    "idle_cards",
    "idle_daily",
    "idle_detail",
    "idle_summary",
    "idle_this_week",
    "week_start",
    "energy_daily",
    "energy_totals",
    "model_energy",
    "power_cap_summary",
    "power_profile",
    "unit_economics",
    "unit_totals",
    "alias_table",
    "projects",
    "rejections",
    "telemetry_coverage",
    "telemetry_rows",
    "unattributed",
    "validation_summary",
    "compare_rules",
    "compare_totals",
    "config_with",
    "drivers_table",
    "period_config",
    "period_days",
]
