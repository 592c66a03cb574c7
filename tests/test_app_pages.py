"""AppTest for every page: no exception, the numbers shown equal the engine's (build_report of the
same source), charts checked through their figure spec, drill state injected through query
parameters and the sidebar through session state."""

from __future__ import annotations

import json
import re
import tomllib
from datetime import date

import pytest
from streamlit.testing.v1 import AppTest

from cost_engine import api, labels, view_state, views
from cost_engine.config import load_config
from cost_engine.report import build_report
from pages import common
from tests.dashboard_support import (APP, EVIL_TENANT, PAGES, ROOT, SAMPLE, copy_sample, make_store,
                                     write_html_bundle)

TIMEOUT = 180


@pytest.fixture(autouse=True)
def sample_source(monkeypatch):
    monkeypatch.setenv("AILEDGER_SOURCE", str(SAMPLE))


def view(**kw) -> dict:
    """Session state holding a view (period, rules, filters: what the sidebar and a link set).
    Default: all the data, the source's own period, so the page's figures are `build_report`'s."""
    return {common.STATE_KEY: view_state.ViewState(**{"period": "all_data", **kw}).model_dump_json()}


def open_page(page: str, *, query: dict | None = None, state: dict | None = None) -> AppTest:
    """The app through its router, on `page`, with a view (default `view()`: all the data), other
    session state and query parameters injected."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    state = {**view(), **(state or {})}
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    if page != "overview":
        at.switch_page(f"pages/{page}.py")
    if query:
        at.query_params.update(query)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def shown(text: str) -> str:
    """Markdown text as the browser shows it (labels and captions escape data for markdown)."""
    return re.sub(r"\\(.)", r"\1", text)


def metrics(at: AppTest) -> dict[str, str]:
    return {shown(m.label): m.value for m in at.metric}


def frame_with(at: AppTest, *columns: str):
    """The first st.dataframe whose table has these columns."""
    for d in at.dataframe:
        if set(columns) <= set(d.value.columns):
            return d.value
    raise AssertionError(f"no table with columns {columns}")


def charts_spec(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def chart_titled(at: AppTest, prefix: str) -> dict:
    for s in charts_spec(at):
        if s["layout"].get("title", {}).get("text", "").startswith(prefix):
            return s
    raise AssertionError(f"no chart titled {prefix!r}: {[s['layout'].get('title') for s in charts_spec(at)]}")


def fmt(v, unit):
    return views.format_value(v, unit)


# ------------------------------------------------------------------------------------- every page


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_with_the_shared_sidebar(page):
    at = open_page(page)
    assert at.title, "page has a title"
    if page == "scenario":
        # The scenario planner does not touch the ledger; under AppTest's legacy pages/ mode it runs
        # without the router (a `streamlit run` server routes it through app.py once any page ran).
        return
    # The router's sidebar is there on every page: period, boundary and the four filters.
    assert len(at.sidebar.multiselect) == 4
    assert at.selectbox(key=common.BOUNDARY_KEY).value == "fully_loaded"
    assert at.selectbox(key=common.PERIOD_KEY).value == "all_data"
    assert not at.error


def test_the_default_view_is_the_whole_local_days():
    """Item 6: the sample runs 02:00 to 02:00 Europe/Berlin (2026-10-05T00Z .. 2026-10-12T00Z);
    a fresh view shows the six whole local days 2026-10-06 .. 2026-10-11, no 2-hour last day."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key=common.PERIOD_KEY).value == "whole_days"
    assert "2026-10-06 to 2026-10-11 (6 days), Europe/Berlin" in shown(at.caption[0].value)
    trend = chart_titled(at, "Trend by day")
    assert trend["data"][0]["x"][0].startswith("2026-10-06") and trend["data"][0]["x"][-1].startswith("2026-10-11")
    assert len(trend["data"][0]["x"]) == 6 and not trend["layout"].get("annotations")
    # and the URL names the view
    assert at.query_params["period"] == "whole_days" and at.query_params["boundary"] == "fully_loaded"


def test_pages_run_on_their_own_too():
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "pages" / f"{page}.py"), default_timeout=TIMEOUT).run()
        assert not at.exception, (page, [e.message for e in at.exception])


# ------------------------------------------------------------------------------------------ overview


def test_overview_numbers_are_the_report(rep):
    at = open_page("overview")
    t, m = rep["totals"], metrics(at)
    assert m["Allocated GPU-h"] == fmt(t["allocated_gpu_hours"], "GPU-h")
    assert m["Available GPU-h"] == fmt(t["available_gpu_hours"], "GPU-h")
    assert m["Allocated / available"] == fmt(t["allocation_rate"], "ratio")
    assert m["Idle rate"] == fmt(t["idle_rate"], "ratio") == "27.9 %"
    assert m["USD per GPU-hour"] == fmt(t["cost_per_gpu_hour"], "USD")
    assert m["Total cost (USD)"] == fmt(t["cost"], "USD") == "9,767.98"
    assert m["Tokens"] == fmt(t["input_tokens"] + t["cached_input_tokens"] + t["output_tokens"], "tokens")
    assert m["USD per 1M tokens"] == fmt(t["cost_per_million_tokens"], "USD")
    assert m["GPU energy (kWh)"] == fmt(t["energy_kwh_gpu"], "kWh")
    assert m["Tokens per joule"] == fmt(t["output_tokens_per_joule"], "tokens/J")

    spend = chart_titled(at, "Spend by tenant")
    top = rep["by_tenant"][:10][::-1]
    assert spend["data"][0]["y"] == [r["tenant"] for r in top]
    assert spend["data"][0]["x"] == pytest.approx([r["cost"] for r in top])
    trend = chart_titled(at, "Trend by day")
    assert trend["data"][0]["x"] == [r["day"] for r in rep["trend"]]
    assert trend["data"][0]["y"] == pytest.approx([r["cost"] for r in rep["trend"]])
    week = chart_titled(at, "Idle GPU-hours this week")
    assert sum(sum(tr["y"]) for tr in week["data"]) == pytest.approx(sum(r["gpu_hours"] for r in rep["idle"]))

    top_table = at.dataframe[0].value
    assert list(top_table["tenant"]) == [r["tenant"] for r in rep["by_tenant"][:10]]
    assert list(top_table["cost"]) == pytest.approx([r["cost"] for r in rep["by_tenant"][:10]])
    labels = [b.label for b in at.get("download_button")]
    assert labels.count("PNG") == labels.count("SVG") == labels.count("HTML") == len(charts_spec(at)) == 3
    assert labels.count("CSV") == labels.count("Parquet") == len(at.dataframe)
    assert "Download the review pack" in labels
    assert any("Reconciliation (USD)" in shown(c.value) for c in at.caption)


def test_sidebar_filters_reach_every_page(comp):
    f = views.Filters(tenants=["research"])
    t = views.totals(comp, f)
    state = view(filters=f)
    at = open_page("overview", state=state)
    assert metrics(at)["Total cost (USD)"] == fmt(t["cost"], "USD")
    assert "tenants: research" in shown(at.caption[0].value)
    spend = chart_titled(at, "Spend by tenant")
    assert spend["data"][0]["y"] == ["research"]
    energy = metrics(open_page("energy", state=state))
    assert energy["GPU energy (kWh)"] == fmt(t["energy_kwh_gpu"], "kWh")
    ranks = open_page("rankings", state=state).dataframe[0].value
    assert list(ranks["tenant"]) == ["research"]
    pool_state = view(filters=views.Filters(pools=["h100-train"]))
    idle = open_page("idle", state=pool_state)
    backlog = idle.dataframe[0].value
    want = views.idle_by_cause(comp, views.Filters(pools=["h100-train"]))
    assert backlog["gpu_hours"].sum() == pytest.approx(want["gpu_hours"].sum())


def test_sidebar_boundary_and_period_recompute(comp):
    narrow = build_report(api.run(SAMPLE, config=views.config_with(comp.config, boundary="narrow")))
    at = open_page("overview", state=view(rules=view_state.Rules(boundary="narrow")))
    assert metrics(at)["Total cost (USD)"] == fmt(narrow["totals"]["cost"], "USD")
    assert "boundary **narrow**" in shown(at.caption[0].value)
    days = (date(2026, 10, 6), date(2026, 10, 7))
    cfg = views.period_config(comp.config, comp, *days)
    two_days = build_report(api.run(SAMPLE, config=cfg))
    at = open_page("overview", state=view(period="custom", first=days[0], last=days[1]))
    assert metrics(at)["Total cost (USD)"] == fmt(two_days["totals"]["cost"], "USD")
    trend = chart_titled(at, "Trend by day")
    assert trend["data"][0]["x"] == [r["day"] for r in two_days["trend"]]


# ------------------------------------------------------------------------------------------ rankings


def test_rankings_top_level(rep):
    at = open_page("rankings")
    table = at.dataframe[0].value
    assert list(table["tenant"]) == [r["tenant"] for r in rep["by_tenant"]]
    assert list(table["cost"]) == pytest.approx([r["cost"] for r in rep["by_tenant"]])
    bar = chart_titled(at, "Tenant ranking")
    assert bar["data"][0]["y"] == [r["tenant"] for r in rep["by_tenant"]][::-1]
    at = open_page("rankings", query={"rank": "model", "sort": "cost_per_million_tokens"})
    models = at.dataframe[0].value
    want = sorted(rep["by_model"], key=lambda r: -(r["cost_per_million_tokens"] or 0))
    assert list(models["model"]) == [r["model"] for r in want]


def test_rankings_drill_tenant_projects(rep):
    at = open_page("rankings", query={"level": "projects", "tenant": "research"})
    assert shown(at.subheader[0].value) == "Projects of research"
    projects = at.dataframe[0].value
    want = [r for r in rep["by_project"] if r["tenant"] == "research"]
    assert list(projects["project"]) == [r["project"] for r in want]
    assert list(projects["cost"]) == pytest.approx([r["cost"] for r in want])
    tenant = next(r for r in rep["by_tenant"] if r["tenant"] == "research")
    assert metrics(at)["Cost (USD)"] == fmt(tenant["cost"], "USD")
    assert any(f"{tenant['cost']:,.2f} USD" in shown(c.value) for c in at.caption)  # lineage carries the figure
    # The breadcrumb goes back up.
    crumb = next(b for b in at.button if b.label == "All owners")
    crumb.click().run()
    assert at.query_params.get("level") == "tenants" and "tenant" not in at.query_params


def test_rankings_drill_project(rep):
    at = open_page("rankings", query={"level": "project", "tenant": "product", "project": "code-copilot"})
    row = next(r for r in rep["by_project"] if r["project"] == "code-copilot")
    assert metrics(at)["Cost (USD)"] == fmt(row["cost"], "USD")
    models = frame_with(at, "model", "tokens")
    assert models["tokens"].sum() == row["input_tokens"] + row["cached_input_tokens"] + row["output_tokens"]
    jobs = frame_with(at, "job", "workload", "allocated_gpu_hours")
    assert jobs["allocated_gpu_hours"].sum() == pytest.approx(row["allocated_gpu_hours"])
    button = next(b for b in at.button if b.label.startswith("Raw records"))
    button.click().run()
    assert at.query_params.get("level") == "records"
    assert at.query_params.get("project") == "code-copilot"


def test_rankings_raw_records_paged(comp):
    q = {"level": "records", "tenant": "product", "project": "code-copilot", "table": "requests", "page": "2",
         "size": "25"}
    at = open_page("rankings", query=q)
    want = views.records(comp, None, None, table="requests", tenant="product", project="code-copilot", page=1,
                         page_size=25)
    table = at.dataframe[0].value
    assert len(table) == 25 and list(table["request_id"]) == want.rows["request_id"].to_list()
    assert any(f"page 2 of {want.pages}" in c.value and "bundle" in c.value for c in at.caption)
    nxt = next(b for b in at.button if b.label == "Next")
    nxt.click().run()
    assert at.query_params.get("page") == "3"
    at = open_page("rankings", query={"level": "records", "model": "mistral-7b"})
    assert set(at.dataframe[0].value["model"]) == {"mistral-7b"}


def test_rankings_records_from_a_store(tmp_path, monkeypatch, comp):
    db = make_store(tmp_path / "s")
    monkeypatch.setenv("AILEDGER_SOURCE", str(db))
    at = open_page("rankings", query={"level": "records", "tenant": "research", "project": "llm-pretrain"})
    assert any("DuckDB store" in c.value for c in at.caption)
    want = views.records(comp, None, None, table="allocations", tenant="research", project="llm-pretrain")
    assert list(at.dataframe[0].value["allocation_id"]) == want.rows["allocation_id"].to_list()


# ----------------------------------------------------------------------------------------------- idle


def test_idle_page(comp, rep):
    at = open_page("idle")
    # the cause pills (the sidebar's bucket control and the measure are button groups too)
    groups = [json.dumps([str(o) for o in g.proto.options], ensure_ascii=False) for g in at.get("button_group")]
    text = next((t for t in groups if " GPU-h" in t and " · " in t), None)
    assert text is not None, groups
    for r in rep["idle"]:
        assert labels.cause_kind(r["cause"], r["kind"]) in text  # words, not snake_case (item 10)
    stacked = chart_titled(at, "Idle GPU-hours by day and cause")
    assert sum(sum(t["y"]) for t in stacked["data"]) == pytest.approx(sum(r["gpu_hours"] for r in rep["idle"]))
    backlog = at.dataframe[0].value
    assert set(backlog["cause"]) == {labels.cause(r["cause"]) for r in rep["idle"]}
    m = metrics(at)
    assert m["Idle rate"] == fmt(rep["totals"]["idle_rate"], "ratio")


def test_idle_cause_and_card(comp):
    at = open_page("idle", query={"cause": "underutilized", "kind": "allocated"})
    cards = views.idle_cards(comp, None, "underutilized", "allocated")
    table = frame_with(at, "gpu_id", "allocations")
    assert list(table["gpu_id"]) == cards["gpu_id"].to_list()
    allocs = frame_with(at, "allocation_id", "idle_gpu_hours")
    assert allocs["idle_gpu_hours"].sum() == pytest.approx(cards["gpu_hours"].sum())
    timeline = chart_titled(at, "Telemetry of")
    label = views.card_label(comp)[cards["gpu_id"][0]]
    assert label in timeline["layout"]["title"]["text"]
    gpu = cards["gpu_id"][1]
    at = open_page("idle", query={"cause": "underutilized", "kind": "allocated", "gpu": gpu})
    assert views.card_label(comp)[gpu] in chart_titled(at, "Telemetry of")["layout"]["title"]["text"]


# --------------------------------------------------------------------------------- energy, unit econ


def test_energy_page(rep, comp):
    at = open_page("energy")
    t, m = rep["totals"], metrics(at)
    assert m["GPU energy (kWh)"] == fmt(t["energy_kwh_gpu"], "kWh")
    assert m["Facility energy (kWh)"] == fmt(t["energy_kwh_facility"], "kWh")
    assert m[f"Energy cost (USD)"] == fmt(t["energy_cost"], "USD")
    daily = chart_titled(at, "Energy by day")
    assert sum(daily["data"][0]["y"]) == pytest.approx(t["energy_kwh_gpu"])
    power = chart_titled(at, "Power against the site cap")
    cap = next(tr for tr in power["data"] if tr["name"] == "site cap")
    assert cap["y"][0] == at.number_input(key="site_cap_kw").value
    at.number_input(key="site_cap_kw").set_value(1000.0).run()
    assert metrics(at)["Hours over the cap"] == "0.00 h"
    tpj = chart_titled(at, "Output tokens per joule")
    by = {r["model"]: r["output_tokens_per_joule"] for r in rep["by_model"]}
    assert dict(zip(tpj["data"][0]["x"], tpj["data"][0]["y"])) == pytest.approx(by)


def test_unit_economics_page(rep):
    at = open_page("unit_economics")
    t = at.dataframe[0].value
    by = {r["model"]: r for r in rep["by_model"]}
    for _, r in t.iterrows():
        assert r["cost_per_million_tokens"] == pytest.approx(by[r["model"]]["cost_per_million_tokens"])
    target = at.number_input(key="unit_target")
    assert target.value == pytest.approx(round(rep["totals"]["cost_per_million_tokens"], 2))
    target.set_value(100.0).run()
    t = at.dataframe[0].value
    assert list(t["meets_target"]) == [v <= 100.0 for v in t["cost_per_million_tokens"]]
    chart = chart_titled(at, "Cost per 1M tokens by model")
    assert chart["layout"]["shapes"][0]["y0"] == 100.0
    m = metrics(at)
    assert m["USD per 1M tokens"] == fmt(rep["totals"]["cost_per_million_tokens"], "USD")


# ----------------------------------------------------------------------------------------------- data


def test_data_page(comp, rep):
    at = open_page("data")
    validation = at.dataframe[0].value
    accepted = dict(zip(validation["table"], validation["accepted"]))
    assert accepted["allocations"] == comp.bundle["allocations"].height
    assert accepted["telemetry"] == comp.bundle["telemetry"].height
    unmapped = next(d.value for d in at.dataframe if "key" in d.value.columns and "records" in d.value.columns)
    assert list(unmapped["key"]) == [r["key"] for r in rep["unattributed"]]
    assert list(unmapped["cost"]) == pytest.approx([r["cost"] for r in rep["unattributed"]])
    editor = at.data_editor[0].value
    assert set(editor.columns) >= {"source", "key", "project", "unmapped"}
    assert editor["unmapped"].iloc[0]


def test_data_page_opens_a_folder_and_saves_aliases(tmp_path, monkeypatch):
    folder = copy_sample(tmp_path / "fw")
    evil = write_html_bundle(tmp_path / "evil")
    monkeypatch.setenv("AILEDGER_SOURCE", str(folder))
    at = open_page("data")
    at.text_input(key="open_path").input(str(tmp_path / "missing"))
    at.form_submit_button[0].click().run()
    assert any("does not exist" in e.value for e in at.error)
    at.text_input(key="open_path").input(str(evil))
    at.form_submit_button[0].click().run()
    assert not at.exception
    assert at.session_state[common.SOURCE_KEY] == str(evil)
    at.switch_page("pages/rankings.py").run()
    assert EVIL_TENANT in list(at.dataframe[0].value["tenant"])
    # Back to the folder copy; saving the aliases unchanged rewrites the file and recomputes.
    at.session_state[common.SOURCE_KEY] = str(folder)
    at.switch_page("pages/data.py").run()
    before = (folder / "aliases.csv").stat().st_mtime_ns
    next(b for b in at.button if b.label.startswith("Save aliases")).click().run()
    assert not at.exception and any("Saved" in s.value for s in at.success)
    assert (folder / "aliases.csv").stat().st_mtime_ns != before


# ---------------------------------------------------------------------------------------------- rules


def test_rules_page_compares_and_saves(tmp_path, monkeypatch, comp):
    folder = copy_sample(tmp_path / "fw")
    monkeypatch.setenv("AILEDGER_SOURCE", str(folder))
    at = open_page("rules")
    assert any("B equals A" in i.value for i in at.info)
    at.radio(key="r_boundary").set_value("narrow").run()
    assert not at.exception
    narrow = build_report(api.run(folder, config=views.config_with(comp.config, boundary="narrow")))
    totals = at.dataframe[1].value
    cost = totals[totals["measure"] == "Cost (USD)"].iloc[0]  # measures in words with units (item 10)
    assert cost["a"] == pytest.approx(9767.980897, rel=1e-6) and cost["b"] == pytest.approx(narrow["totals"]["cost"])
    by_tenant = at.dataframe[2].value
    want = {r["tenant"]: r["cost"] for r in narrow["by_tenant"]}
    for _, r in by_tenant.iterrows():
        assert r["cost_b"] == pytest.approx(want.get(r["tenant"], 0.0))
    chart = chart_titled(at, "Cost under A")
    assert [t["name"] for t in chart["data"]] == ["A (current)", "B (edited)"]
    assert "name = \"narrow\"" in at.code[0].value
    # Write the TOML beside the source: the dashboard now uses it.
    next(b for b in at.button if b.label.startswith("Write to ailedger.toml")).click().run()
    assert not at.exception
    saved = load_config(folder / "ailedger.toml")
    assert saved.boundary.name == "narrow" and saved.period.timezone == "Europe/Berlin"
    tomllib.loads((folder / "ailedger.toml").read_text())
    at.switch_page("pages/overview.py").run()
    assert metrics(at)["Total cost (USD)"] == fmt(narrow["totals"]["cost"], "USD")


def test_rules_apply_in_session(comp):
    at = open_page("rules")
    at.number_input(key="r_pue").set_value(1.5).run()
    next(b for b in at.button if b.label.startswith("Use B")).click().run()
    assert not at.exception
    # B became the view's rules: in the session's view state, and so in the link
    assert view_state.ViewState.model_validate_json(at.session_state[common.STATE_KEY]).rules.pue == 1.5
    assert at.query_params["pue"] == "1.5"
    at.switch_page("pages/energy.py").run()
    b = api.run(SAMPLE, config=views.config_with(comp.config, pue=1.5))
    assert metrics(at)["Facility energy (kWh)"] == fmt(build_report(b)["totals"]["energy_kwh_facility"], "kWh")


# ------------------------------------------------------------------------------------ HTML as text


def _all_nodes(at: AppTest):
    yield from at.main
    yield from at.sidebar


def test_names_with_html_render_as_text(tmp_path, monkeypatch):
    evil = write_html_bundle(tmp_path / "evil")
    monkeypatch.setenv("AILEDGER_SOURCE", str(evil))
    visits = [(p, None) for p in PAGES] + [
        ("rankings", {"level": "projects", "tenant": EVIL_TENANT}),
        ("rankings", {"level": "project", "tenant": EVIL_TENANT, "project": "<b>bold-project</b>"}),
        ("rankings", {"level": "records", "tenant": EVIL_TENANT, "project": "<b>bold-project</b>"}),
        ("idle", {"cause": "underutilized", "kind": "allocated"}),
    ]
    for page, query in visits:
        at = open_page(page, query=query)
        assert not at.get("html"), page  # st.html is never used
        for node in _all_nodes(at):
            proto = getattr(node, "proto", None)
            if proto is not None and hasattr(proto, "allow_html"):
                assert not proto.allow_html, (page, node)
            value = getattr(node, "value", None)
            if isinstance(value, str) and "script" in value and node.type in ("markdown", "caption", "subheader",
                                                                                "title", "header"):
                assert "<script>" not in value, (page, value)  # escaped for markdown: \<script\>
    at = open_page("rankings", query={"level": "projects", "tenant": EVIL_TENANT})
    assert at.subheader[0].value == "Projects of " + common.md(EVIL_TENANT)
    assert shown(at.subheader[0].value) == "Projects of " + EVIL_TENANT
    assert list(at.dataframe[0].value["project"]) == ["<b>bold-project</b>"]


def test_no_page_allows_raw_html():
    for path in [APP, *sorted((ROOT / "pages").glob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"unsafe_allow_html\s*=\s*True", text), path
        assert "st.html(" not in text, path


def test_md_escapes_markdown_and_html():
    s = common.md("<script>alert(1)</script> **x** $y$ [a](javascript:1)")
    assert "<script>" not in s and "\\*\\*x\\*\\*" in s and "\\$y\\$" in s and "\\[a\\]" in s


def test_cache_key_follows_the_data(tmp_path):
    folder = copy_sample(tmp_path / "fw")
    v1 = common.data_version(str(folder))
    assert common.data_version(str(folder)) == v1
    p = folder / "costs.csv"
    p.write_text(p.read_text() + "\n")
    assert common.data_version(str(folder)) != v1
    db = make_store(tmp_path / "s")
    d1 = common.data_version(str(db))
    from cost_engine import store
    from cost_engine.bundle import Bundle
    from cost_engine.contract import make_frame

    store.ingest(db, Bundle.from_frames({"aliases": make_frame("aliases", [
        {"source": "gateway", "key": "new-key", "project": "rlhf"}])}))
    assert common.data_version(str(db)) != d1
