"""AppTest of the Budgets page and the Overview's alerts: what they show equals the engine's
budgets.evaluate / alerts.evaluate on the same source."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from cost_engine import alerts, budgets
from tests.dashboard_support import APP, SAMPLE


@pytest.fixture(autouse=True)
def sample_source(monkeypatch):
    monkeypatch.setenv("AILEDGER_SOURCE", str(SAMPLE))


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=180)
    at.run()
    if page != "overview":
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_budgets_page_shows_the_engines_figures(comp):
    rep = budgets.evaluate(comp)
    at = open_page("budgets")
    m = {x.label: x.value for x in at.metric}
    statuses = rep.status["status"].to_list()
    assert m["Budgets in force"] == str(rep.status.height) == "5"
    assert m["Over budget (projected)"] == str(statuses.count("over")) == "1"
    assert m["At risk (80 % interval)"] == str(statuses.count("at risk"))
    assert m["Alerts firing"] == "1"
    shown = next(d.value for d in at.dataframe if "projected" in d.value.columns)
    assert list(shown["budget_id"]) == rep.status["budget_id"].to_list()
    assert list(shown["projected"]) == pytest.approx(rep.status["projected"].to_list())
    assert list(shown["hi80"]) == pytest.approx(rep.status["hi80"].to_list())
    # The burn-down of the first budget: its path, budget left = amount - spent.
    first = rep.status.row(0, named=True)
    spec = at.get("plotly_chart")[0].proto.spec
    assert first["budget_id"] in spec and "Burn-down" in spec
    assert [h.value for h in at.subheader] == ["Budgets", "Burn-down", "Alerts", "Burn rate now", "Edit budgets"]
    assert at.button(key="save_budgets") is not None  # no access config: the local user is the admin


def test_overview_lists_the_firing_alerts(comp):
    found = alerts.evaluate(comp, budgets.evaluate(comp))
    firing = found.filter(found["state"] == "firing")
    at = open_page("overview")
    warnings = [w.value for w in at.warning]
    assert len(warnings) == firing.height == 1
    assert "bud\\-rlhf\\-month" in warnings[0] and "forecast\\_over\\_budget" in warnings[0]


def test_budgets_page_lists_rejected_rows_as_unknown(tmp_path, monkeypatch):
    """Issue 43 (1): a budgets file with two valid rows and eleven refused ones (tests/test_budgets.py,
    refused_folder): the page's table holds all 13, each refused one with status
    "unknown (rejected (budgets.csv row N): reason)"; the burn-down offers only the two with a span."""
    from tests.test_budgets import refused_folder

    monkeypatch.setenv("AILEDGER_SOURCE", str(refused_folder(tmp_path)))
    at = open_page("budgets")
    shown = next(d.value for d in at.dataframe if "projected" in d.value.columns)
    said = dict(zip(shown["budget_id"], shown["status"]))
    assert len(shown) == 13 and said["ok-1"] == "within"
    assert said["minus"] == "unknown (rejected (budgets.csv row 12): amount -5 must be above 0)"
    assert said["money"] == "unknown (rejected (budgets.csv row 10): currency EUR differs from USD and no rate is " \
                            "configured)"
    assert [o.split(" · ")[0] for o in at.selectbox(key="burndown_budget").options] == ["ok-1", "ok-2"]
