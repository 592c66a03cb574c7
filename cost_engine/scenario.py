"""What-if economics: one workload priced as a hosted API, rented GPUs, owned GPUs (new or secondary) or a hybrid, with sensitivity and break-even.

The planner's public face: its parts live in scenario_model (the inputs and their loading),
unit_cost (the seed's exact formulas), scenario_eval (pricing), scenario_sweep (sensitivity and
break-even) and scenario_fill (calibration and the page's edits)."""

from __future__ import annotations

from .scenario_eval import (
    evaluate,
    OptionResult,
    results_frame,
    workload_summary,
)
from .scenario_fill import (
    apply_edits,
    calibrate,
    editable_numbers,
    is_integer_field,
)
from .scenario_model import (
    CATEGORIES,
    dump_scenario,
    HostedApi,
    Hybrid,
    ITEM_CATEGORY,
    load_scenario,
    MEASURED_KEYS,
    OPTION_KINDS,
    Owned,
    parse_scenario,
    parse_scenario_text,
    Rented,
    Scenario,
    ScenarioError,
    Split,
    SWEEP_PARAMETERS,
    Workload,
)
from .scenario_sweep import (
    break_even,
    BreakEven,
    cumulative_costs,
    default_sweep_values,
    sweep,
    with_parameter,
)
from .unit_cost import (
    capital_cost_per_month,
    cost_per_million_tokens,
    fixed_cost_per_million,
    format_unitcost_table,
    unitcost_table,
    UnitCostRow,
    utilization_table,
    UtilizationRow,
)

__all__ = [
    "CATEGORIES",
    "ITEM_CATEGORY",
    "OPTION_KINDS",
    "SWEEP_PARAMETERS",
    "MEASURED_KEYS",
    "ScenarioError",
    "Workload",
    "Split",
    "HostedApi",
    "Rented",
    "Owned",
    "Hybrid",
    "Scenario",
    "OptionResult",
    "BreakEven",
    "UtilizationRow",
    "UnitCostRow",
    "parse_scenario",
    "parse_scenario_text",
    "load_scenario",
    "dump_scenario",
    "evaluate",
    "workload_summary",
    "with_parameter",
    "sweep",
    "default_sweep_values",
    "break_even",
    "cumulative_costs",
    "calibrate",
    "results_frame",
    "editable_numbers",
    "is_integer_field",
    "apply_edits",
    "cost_per_million_tokens",
    "fixed_cost_per_million",
    "utilization_table",
    "unitcost_table",
    "format_unitcost_table",
    "capital_cost_per_month",
]
