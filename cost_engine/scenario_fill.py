"""Filling a scenario from outside: measured fleet figures (calibration) and the page's edits."""

from __future__ import annotations

import math
from typing import Sequence

from .scenario_model import MEASURED_KEYS, Scenario, ScenarioError, parse_scenario

# ---------------------------------------------------------------------------
# Calibration from measured fleet figures
# ---------------------------------------------------------------------------


def calibrate(
    scenario: Scenario,
    measured: dict[str, float | None],
    options: Sequence[str] | None = None,
    strict: bool = True,
) -> tuple[Scenario, dict[str, str]]:
    """Fill the scenario from measured fleet figures; return it and {field path: measured key}.

    Expected keys (see MEASURED_KEYS), all optional; a None value is skipped:
      output_tokens_per_s_per_gpu  output tokens/s per card at the SLO      -> options.*.output_tokens_per_s_per_gpu
      utilization | utilization_pct productive utilization (0..1 | 0..100)  -> options.*.utilization
      idle_power_w, peak_power_w   GPU watts per card                        -> options.*.idle_w / peak_w
      avg_power_w                  mean GPU watts per card at that utilization: peak_w = idle_w +
                                   (avg - idle_w) / utilization; without idle_w (or avg < idle_w)
                                   idle_w = peak_w = avg
      price_per_kwh                tariff                                    -> options.*.price_per_kwh
      cost_per_gpu_hour            $ per GPU-hour                            -> rented price_per_gpu_hour
      server_overhead, pue         facility factors                          -> options.*.server_factor / pue
      input_tokens_per_month, cached_input_tokens_per_month, output_tokens_per_month,
      acceptance_rate              -> workload.*
      prefill_time_share           -> split.prefill_time_share, split.method = "phase_time"
    ``options`` names the options to fill (default: every rented and owned option). Unknown keys are
    an error when ``strict``; otherwise they are ignored.
    """
    unknown = sorted(k for k in measured if k not in MEASURED_KEYS)
    if unknown and strict:
        raise ScenarioError(f"calibrate: unknown measured keys {unknown}; known: {list(MEASURED_KEYS)}")
    m = {k: float(v) for k, v in measured.items() if k in MEASURED_KEYS and v is not None}
    for k, v in m.items():
        if not math.isfinite(v) or v < 0:
            raise ScenarioError(f"calibrate: measured {k} must be a finite number >= 0, got {v}")
    if "utilization_pct" in m and "utilization" not in m:
        m["utilization"] = m["utilization_pct"] / 100.0
        util_key = "utilization_pct"
    else:
        util_key = "utilization"
    d = scenario.model_dump()
    prov: dict[str, str] = {}
    targets = options
    if targets is not None:
        for nm in targets:
            scenario.option(nm)
    for o in d["options"]:
        if o["kind"] not in ("rented", "owned") or (targets is not None and o["name"] not in targets):
            continue
        p = f"options.{o['name']}"

        def put(fld: str, key: str, value: float) -> None:
            o[fld] = value
            prov[f"{p}.{fld}"] = key

        if "output_tokens_per_s_per_gpu" in m:
            put("output_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu", m["output_tokens_per_s_per_gpu"])
        if "utilization" in m:
            put("utilization", util_key, m["utilization"])
        if "server_overhead" in m:
            put("server_factor", "server_overhead", m["server_overhead"])
        if "pue" in m:
            put("pue", "pue", m["pue"])
        if "price_per_kwh" in m:
            put("price_per_kwh", "price_per_kwh", m["price_per_kwh"])
        if "cost_per_gpu_hour" in m and o["kind"] == "rented":
            put("price_per_gpu_hour", "cost_per_gpu_hour", m["cost_per_gpu_hour"])
        if "idle_power_w" in m:
            put("idle_w", "idle_power_w", m["idle_power_w"])
        if "peak_power_w" in m:
            put("peak_w", "peak_power_w", m["peak_power_w"])
        elif "avg_power_w" in m:
            avg = m["avg_power_w"]
            idle = o.get("idle_w")
            u = o["utilization"]
            if idle is not None and avg >= idle and u > 0:
                put("peak_w", f"avg_power_w (with idle_w and {prov.get(f'{p}.utilization', 'the option utilization')})", idle + (avg - idle) / u)
            else:
                put("idle_w", "avg_power_w (flat)", avg)
                put("peak_w", "avg_power_w (flat)", avg)
    w = d["workload"]
    for k in ("input_tokens_per_month", "cached_input_tokens_per_month", "output_tokens_per_month", "acceptance_rate"):
        if k in m:
            w[k] = m[k]
            prov[f"workload.{k}"] = k
    if "prefill_time_share" in m:
        d["split"]["prefill_time_share"] = m["prefill_time_share"]
        d["split"]["method"] = "phase_time"
        prov["split.prefill_time_share"] = "prefill_time_share"
        prov["split.method"] = "prefill_time_share"
    try:
        return parse_scenario(d), prov
    except ScenarioError as exc:
        raise ScenarioError(f"calibrate: {exc}") from None


# ---------------------------------------------------------------------------
# Form support for the page: which numbers can be edited, and applying edits
# ---------------------------------------------------------------------------

_INT_FIELDS = {"months", "life_months"}


def editable_numbers(scenario: Scenario) -> dict[str, dict[str, float | int]]:
    """{section: {field: value}} for every numeric field that is set; sections: 'workload', 'split', 'options.<name>'."""
    d = scenario.model_dump()

    def nums(x: dict) -> dict[str, float | int]:
        return {
            k: v
            for k, v in x.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None
        }

    out = {"workload": nums(d["workload"]), "split": nums(d["split"])}
    for o in d["options"]:
        out[f"options.{o['name']}"] = nums(o)
    return out


def is_integer_field(name: str) -> bool:
    return name in _INT_FIELDS


def apply_edits(scenario: Scenario, edits: dict[str, dict[str, float | int]]) -> Scenario:
    """The scenario with edited numbers (same shape as editable_numbers), validated."""
    d = scenario.model_dump()
    for section, values in edits.items():
        if section in ("workload", "split"):
            d[section].update(values)
            continue
        if section.startswith("options."):
            nm = section.removeprefix("options.")
            for o in d["options"]:
                if o["name"] == nm:
                    o.update(values)
                    break
            else:
                raise ScenarioError(f"{section}: unknown option")
            continue
        raise ScenarioError(f"{section}: unknown section")
    return parse_scenario(d)
