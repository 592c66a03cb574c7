"""Measured fleet figures for the scenario planner, read off a report, each with where it came from."""

from __future__ import annotations

HOURS_PER_MONTH = 730.0


def _period_hours(report: dict) -> float:
    from datetime import datetime

    start = datetime.fromisoformat(report["period"]["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(report["period"]["end"].replace("Z", "+00:00"))
    return (end - start).total_seconds() / 3600


def measured_from_report(report: dict) -> tuple[dict[str, float | None], dict[str, str]]:
    """The `scenario.calibrate` inputs a report can give, and one line of provenance each.

    Serving figures come from the models' rows (the inference allocations): throughput per
    card is output tokens over the serving cards' *active* hours (what a card delivers while
    busy, the closest measured figure to throughput at the SLO); utilization is active over
    allocated hours of those cards. Figures the report cannot give are None.
    """
    t, models = report["totals"], report["by_model"]
    served = [m for m in models if m.get("allocated_gpu_hours")]
    out_tokens = sum(m["output_tokens"] for m in served)
    active_h = sum(m.get("active_gpu_hours") or 0.0 for m in served)
    alloc_h = sum(m["allocated_gpu_hours"] for m in served)
    energy_kwh = sum(m.get("energy_kwh_gpu") or 0.0 for m in served)
    hours = _period_hours(report)
    scale = HOURS_PER_MONTH / hours if hours else None

    measured: dict[str, float | None] = {
        "output_tokens_per_s_per_gpu": out_tokens / (active_h * 3600) if active_h else None,
        "utilization": active_h / alloc_h if alloc_h else None,
        "avg_power_w": energy_kwh * 1000 / alloc_h if alloc_h and energy_kwh else None,
        "price_per_kwh": (t["energy_cost"] / t["energy_kwh_facility"]) if t.get("energy_kwh_facility") else None,
        "cost_per_gpu_hour": t.get("cost_per_allocated_gpu_hour"),
        "input_tokens_per_month": t["input_tokens"] * scale if scale else None,
        "cached_input_tokens_per_month": t["cached_input_tokens"] * scale if scale else None,
        "output_tokens_per_month": t["output_tokens"] * scale if scale else None,
    }
    period = f"{report['period']['start']} .. {report['period']['end']}"
    served_names = ", ".join(m["model"] for m in served) or "no served model"
    provenance = {
        "output_tokens_per_s_per_gpu": f"by_model ({served_names}): output tokens / active GPU-hours x 3600",
        "utilization": f"by_model ({served_names}): active / allocated GPU-hours of the serving cards",
        "avg_power_w": f"by_model ({served_names}): GPU kWh x 1000 / allocated GPU-hours",
        "price_per_kwh": "totals: energy_cost / energy_kwh_facility (the tariff actually paid)",
        "cost_per_gpu_hour": f"totals: cost_per_allocated_gpu_hour under boundary {report['boundary']['name']}",
        "input_tokens_per_month": f"totals: input_tokens over {period}, scaled to {HOURS_PER_MONTH:g} h",
        "cached_input_tokens_per_month": f"totals: cached_input_tokens over {period}, scaled to {HOURS_PER_MONTH:g} h",
        "output_tokens_per_month": f"totals: output_tokens over {period}, scaled to {HOURS_PER_MONTH:g} h",
    }
    keep = {k: v for k, v in measured.items() if v is not None}
    return keep, {k: provenance[k] for k in keep}


def calibrate_from_report(scenario, report: dict):
    """Calibrate a scenario from a report: (scenario, rows of field, measured key, value, source)."""
    from .scenario import calibrate

    measured, where = measured_from_report(report)
    calibrated, filled = calibrate(scenario, measured)
    rows = []
    for field, used in filled.items():
        key = used.split()[0]  # calibrate names the key first, then how it was used
        rows.append({"field": field, "measured": used, "value": measured[key], "source": where[key]})
    return calibrated, rows
