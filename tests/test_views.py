"""cost_engine.views: unfiltered views equal the report; filters narrow consistently; raw records
page from the store and from the bundle alike; uploads and alias saves are safe."""

from __future__ import annotations

import io
import math
import zipfile
from datetime import date
from pathlib import Path

import polars as pl
import pytest

from cost_engine import api, lineage, store, uploads, views
from cost_engine.access import Principal
from cost_engine.report import build_report
from tests.dashboard_support import EVIL_TENANT, SAMPLE, copy_sample, make_store, write_html_bundle

ADMIN = Principal("local", None)  # writes of shared settings are for administrators

@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("store"))


def close(a, b, tol=1e-6):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


# ---------------------------------------------------------------------------- unfiltered = report


def test_kpi_cards_are_the_report_totals(comp, rep):
    t = rep["totals"]
    cards = {r["key"]: r["value"] for r in views.kpi_cards(comp).iter_rows(named=True)}
    for key in ("allocated_gpu_hours", "available_gpu_hours", "idle_rate", "cost_per_gpu_hour",
                "cost_per_million_tokens", "energy_kwh_gpu", "output_tokens_per_joule", "cost", "allocation_rate"):
        assert close(cards[key], t[key]), key
    assert cards["tokens"] == t["input_tokens"] + t["cached_input_tokens"] + t["output_tokens"]


def test_rankings_are_the_report_tables(comp, rep):
    for level, key in (("tenant", "by_tenant"), ("project", "by_project"), ("model", "by_model")):
        got = views.rankings(comp, None, level)
        want = rep[key]
        assert got.height == len(want)
        assert [round(c, 6) for c in got["cost"].to_list()] == [round(r["cost"], 6) for r in want]
        name = "model" if level == "model" else level
        assert got[name].to_list() == [r[name] for r in want]


@pytest.mark.parametrize("sort,col", [("gpu_hours", "allocated_gpu_hours"), ("tokens", "tokens"),
                                      ("cost_per_million_tokens", "cost_per_million_tokens")])
def test_rankings_sort(comp, sort, col):
    t = views.rankings(comp, None, "project", sort)
    vals = [v for v in t[col].to_list() if v is not None]
    assert vals == sorted(vals, reverse=True)
    assert t[col].to_list()[: len(vals)] == vals  # nulls last


def test_idle_views_are_the_report_idle(comp, rep):
    by_cause = views.idle_by_cause(comp)
    want = {(r["kind"], r["cause"]): r for r in rep["idle"]}
    assert set(zip(by_cause["kind"], by_cause["cause"])) == set(want)
    for r in by_cause.iter_rows(named=True):
        assert close(r["gpu_hours"], want[(r["kind"], r["cause"])]["gpu_hours"])
        assert close(r["cost"], want[(r["kind"], r["cause"])]["cost"])
    daily = views.idle_daily(comp)
    assert close(daily["gpu_hours"].sum(), by_cause["gpu_hours"].sum())
    pool = views.idle_by_pool(comp)
    assert close(pool["cost"].sum(), by_cause["cost"].sum())
    backlog = views.idle_backlog(comp)
    assert close(backlog["gpu_hours"].sum(), by_cause["gpu_hours"].sum())
    # Card offenders are named by node, not by raw UUID.
    offenders = [o for row in backlog.filter(pl.col("kind") == "unallocated")["top_offenders"].to_list() for o in row]
    assert offenders and all(" · " in o for o in offenders)


def test_idle_this_week_covers_the_last_seven_days(comp):
    assert views.week_start(comp) == date(2026, 10, 5)  # the sample period is one week
    assert close(views.idle_this_week(comp)["gpu_hours"].sum(), views.idle_by_cause(comp)["gpu_hours"].sum())


def test_idle_cards_and_allocations_add_up_to_the_cause(comp):
    by_cause = views.idle_by_cause(comp)
    for r in by_cause.iter_rows(named=True):
        cards = views.idle_cards(comp, None, r["cause"], r["kind"])
        assert close(cards["gpu_hours"].sum(), r["gpu_hours"], 1e-6)
        if r["kind"] == "allocated":
            allocs = views.idle_allocations(comp, None, r["cause"], r["kind"])
            assert close(allocs["idle_gpu_hours"].sum(), r["gpu_hours"], 1e-6)


def test_trend_matches_report(comp, rep):
    t = views.trend(comp)
    assert [d.isoformat() for d in t["day"]] == [r["day"] for r in rep["trend"]]
    assert close(t["cost"].sum(), sum(r["cost"] for r in rep["trend"]))


def test_card_timeline_is_bounded_and_in_period_zone(comp):
    gpu = comp.ledger.cards["gpu_id"][0]
    tl = views.card_timeline(comp, gpu, max_points=500)
    assert 0 < tl.height <= 500
    assert tl.schema["ts"].time_zone == comp.period.timezone
    allocs = views.card_allocations(comp, gpu)
    assert (allocs["end"] > allocs["start"]).all()
    labels = views.card_label(comp)
    assert labels[gpu].startswith(comp.ledger.cards["node"][0])


def test_energy_views(comp, rep):
    daily = views.energy_daily(comp)
    assert close(daily["energy_kwh_gpu"].sum(), rep["totals"]["energy_kwh_gpu"])
    assert close(daily["energy_cost"].sum(), rep["totals"]["energy_cost"])
    assert daily["co2e_kg"].null_count() == 0  # the sample tariffs carry carbon intensity
    prof = views.power_profile(comp, None, cap_kw=10.0)
    assert prof.height > 0 and (prof["facility_kw"] >= prof["gpu_kw"]).all()
    s = views.power_cap_summary(prof)
    assert s["peak_kw"] == pytest.approx(prof["facility_kw"].max())
    assert s["hours_over_cap"] == prof.filter(pl.col("over_cap")).height
    none = views.power_cap_summary(views.power_profile(comp, None, cap_kw=None))
    assert none["hours_over_cap"] == 0


def test_unit_economics_against_target(comp, rep):
    t = views.unit_economics(comp, None, target=80.0)
    by = {r["model"]: r for r in rep["by_model"]}
    for r in t.iter_rows(named=True):
        assert close(r["cost_per_million_tokens"], by[r["model"]]["cost_per_million_tokens"])
        assert r["meets_target"] == (r["cost_per_million_tokens"] <= 80.0)
        assert close(r["input_share"] + r["cached_share"] + r["output_share"], 1.0)
    u = views.unit_totals(comp)
    assert close(u["cost_per_million_tokens"], rep["totals"]["cost_per_million_tokens"])


def test_data_views(comp, rep):
    v = views.validation_summary(comp.bundle)
    assert v.filter(pl.col("table") == "allocations")["accepted"].item() == comp.bundle["allocations"].height
    un = views.unattributed(comp)
    assert un.select("source", "key").rows() == [(r["source"], r["key"]) for r in rep["unattributed"]]
    aliases = views.alias_table(comp)
    unmapped = aliases.filter(pl.col("unmapped"))
    assert set(unmapped["key"]) == set(un["key"]) and unmapped["project"].null_count() == unmapped.height
    assert aliases["unmapped"][0]  # unmapped keys first, where the editor shows them
    cov = views.telemetry_coverage(comp)
    assert close(cov["covered_gpu_hours"].sum() / cov["allocated_gpu_hours"].sum(), rep["totals"]["telemetry_coverage"])


# ----------------------------------------------------------------------------------- filters


def test_filters_model_normalises():
    f = views.Filters(pools=["b", "a", "a"], tenants="x")
    assert f.pools == ("a", "b") and f.tenants == ("x",)
    assert views.Filters().empty and not f.empty
    assert views.Filters.model_validate_json(f.key()) == f
    with pytest.raises(ValueError):
        views.Filters(unknown=["x"])


def test_no_filters_is_the_same_computation(comp):
    assert views.apply_filters(comp, views.Filters()) is comp
    assert views.apply_filters(comp, None) is comp


def test_tenant_filters_partition_owner_cost(comp, rep):
    opts = views.filter_options(comp)
    total = 0.0
    for tenant in opts["tenants"]:
        t = views.totals(comp, views.Filters(tenants=[tenant]))
        row = next((r for r in rep["by_tenant"] if r["tenant"] == tenant), None)
        assert close(t["cost"], row["cost"] if row else 0.0)
        assert close(t["allocated_gpu_hours"], row["allocated_gpu_hours"] if row else 0.0)
        total += t["cost"]
    assert close(total, rep["reconciliation"]["attributed"])


def test_pool_filters_partition_card_time(comp, rep):
    opts = views.filter_options(comp)
    hours = [views.totals(comp, views.Filters(pools=[p]))["allocated_gpu_hours"] for p in opts["pools"]]
    assert close(sum(hours), rep["totals"]["allocated_gpu_hours"])
    avail = [views.totals(comp, views.Filters(pools=[p]))["available_gpu_hours"] for p in opts["pools"]]
    assert close(sum(avail), rep["totals"]["available_gpu_hours"])
    # Inference pools keep their requests; a training pool serves no model.
    infer = views.totals(comp, views.Filters(pools=["a100-infer"]))
    train = views.totals(comp, views.Filters(pools=["h100-train"]))
    assert infer["requests"] > 0 and train["requests"] == 0


def test_workload_and_accelerator_filters(comp):
    training = views.totals(comp, views.Filters(workloads=["training"]))
    assert training["requests"] == 0 and training["allocated_gpu_hours"] > 0
    infer = views.totals(comp, views.Filters(workloads=["inference"]))
    assert infer["requests"] > 0
    acc = views.filter_options(comp)["accelerators"]
    hours = sum(views.totals(comp, views.Filters(accelerators=[a]))["allocated_gpu_hours"] for a in acc)
    assert close(hours, views.totals(comp)["allocated_gpu_hours"])


def test_filtered_views_only_show_the_filter(comp):
    f = views.Filters(tenants=["research"])
    assert views.rankings(comp, f, "tenant")["tenant"].to_list() == ["research"]
    assert set(views.rankings(comp, f, "project")["tenant"]) == {"research"}
    cards = views.idle_detail(comp, f)
    assert set(cards["kind"]) == {"allocated"}  # unallocated time has no tenant
    f2 = views.Filters(pools=["h100-train"])
    assert set(views.idle_by_pool(comp, f2)["pool"]) == {"h100-train"}


# ------------------------------------------------------------------------------------ drill-down


def test_project_breakdown(comp, rep):
    row = next(r for r in rep["by_project"] if r["project"] == "llm-pretrain")
    jobs = views.project_jobs(comp, None, "research", "llm-pretrain")
    assert close(jobs["allocated_gpu_hours"].sum(), row["allocated_gpu_hours"])
    models = views.project_models(comp, None, "product", "code-copilot")
    prow = next(r for r in rep["by_project"] if r["project"] == "code-copilot")
    assert models["tokens"].sum() == prow["input_tokens"] + prow["cached_input_tokens"] + prow["output_tokens"]
    services = views.project_services(comp, None, "platform", "shared-inference")
    assert services.height > 0 and set(services["workload"]) == {"inference"}


def test_lineage_summary_carries_the_figure(comp, rep):
    row = next(r for r in rep["by_project"] if r["project"] == "rlhf")
    s = views.lineage_summary(comp, None, tenant="research", project="rlhf")
    assert close(s["total_cost"], row["cost"])
    assert s["allocations"] > 0 and s["requests"] > 0


@pytest.mark.parametrize("table", ["allocations", "requests", "costs"])
def test_records_memory_and_store_agree(comp, db, table):
    who = {"tenant": "product", "project": "code-copilot"}
    e = lineage.explain(comp, **who)
    total = {"allocations": e.allocations.height, "requests": e.requests.height, "costs": e.costs.height}[table]
    mem = views.records(comp, None, None, table=table, page=0, page_size=7, **who)
    sto = views.records(comp, None, db, table=table, page=0, page_size=7, **who)
    assert mem.backend == "memory" and sto.backend == "store"
    assert mem.total == sto.total == total
    assert mem.rows.height == sto.rows.height == min(7, total)
    key = {"allocations": "allocation_id", "requests": "request_id", "costs": "cost_id"}[table]
    assert mem.rows[key].to_list() == sto.rows[key].to_list()
    if table == "allocations":
        assert mem.rows["start"].to_list() == sto.rows["start"].to_list()
    last = views.records(comp, None, db, table=table, page=10_000, page_size=7, **who)
    assert last.page == mem.pages - 1 and 0 < last.rows.height <= 7


def test_records_read_only_one_page_from_the_store(comp, db, monkeypatch):
    calls = []
    real = store.query_records

    def spy(path, table, **kw):
        calls.append((table, kw))
        return real(path, table, **kw)

    monkeypatch.setattr(store, "query_records", spy)
    page = views.records(comp, None, db, table="requests", tenant="research", page=1, page_size=25)
    assert page.rows.height == 25 and page.total > 50
    assert len(calls) == 1
    table, kw = calls[0]
    assert table == "requests" and kw["limit"] == 25 and len(kw["ids"]) == 25


def test_records_page_size_is_capped(comp):
    page = views.records(comp, None, None, table="requests", tenant="product", page_size=10_000)
    assert page.page_size == views.MAX_PAGE_SIZE and page.rows.height == views.MAX_PAGE_SIZE


def test_records_of_a_model(comp):
    page = views.records(comp, None, None, table="allocations", model="mistral-7b", page_size=200)
    assert page.total > 0 and set(page.rows["model"]) == {"mistral-7b"}


# ----------------------------------------------------------------------------------------- rules


def test_config_with_presets_custom_and_rules(comp):
    base = comp.config
    assert views.config_with(base, boundary="narrow").boundary.included == ("depreciation", "power")
    custom = views.config_with(base, boundary="custom", categories=["power", "gpu_rental"])
    assert custom.boundary.name == "custom" and custom.boundary.included == ("gpu_rental", "power")
    assert views.config_with(base, boundary="custom", categories=["power"]).boundary.name == "energy_only"
    cfg = views.config_with(base, idle="proportional", pue=1.5, threshold_pct=10.0, drivers={"software": "even"})
    assert cfg.allocation.idle == "proportional" and cfg.energy.pue == 1.5
    assert cfg.activity.threshold_pct == 10.0 and cfg.allocation.drivers == {"software": "even"}
    assert cfg.period == base.period
    with pytest.raises(TypeError):
        views.config_with(base, nonsense=1)
    with pytest.raises(ValueError):
        views.config_with(base, pue=0.5)


def test_period_config_narrows_to_days(comp):
    first, last = views.period_days(comp)
    cfg = views.period_config(comp.config, comp, first, first)
    narrowed = api.run(SAMPLE, config=cfg)
    assert narrowed.period.start == comp.period.start
    assert narrowed.period.hours < comp.period.hours


def test_compare_rules(comp):
    narrow = api.run(SAMPLE, config=views.config_with(comp.config, boundary="narrow"))
    t = views.compare_rules(comp, narrow, "tenant")
    a = {r["tenant"]: r["cost"] for r in build_report(comp)["by_tenant"]}
    b = {r["tenant"]: r["cost"] for r in build_report(narrow)["by_tenant"]}
    for r in t.iter_rows(named=True):
        assert close(r["cost_a"], a.get(r["tenant"], 0.0)) and close(r["cost_b"], b.get(r["tenant"], 0.0))
        assert close(r["difference"], r["cost_b"] - r["cost_a"])
    tot = views.compare_totals(comp, narrow)
    cost = tot.filter(pl.col("measure") == "cost").row(0, named=True)
    assert cost["b"] < cost["a"]
    p = views.compare_rules(comp, comp, "project")
    assert (p["difference"].abs() < 1e-9).all()


def test_drivers_table(comp):
    d = views.drivers_table(comp.config)
    assert d.filter(pl.col("category") == "power")["driver"].item() == "energy"


# --------------------------------------------------------------------------------------- uploads


def _zip(members: dict[str, bytes], link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, "/etc/passwd")
    return buf.getvalue()


@pytest.mark.parametrize("name", ["../evil.csv", "a/../../evil.csv", "/abs/evil.csv", "C:/evil.csv", "..\\evil.csv"])
def test_zip_members_that_escape_are_rejected(tmp_path, name):
    data = _zip({"allocations.csv": b"x", name: b"boom"})
    with pytest.raises(uploads.UploadError):
        uploads.safe_extract(data, tmp_path / "t")
    assert not (tmp_path / "evil.csv").exists()


def test_zip_symlinks_and_bombs_are_rejected(tmp_path):
    with pytest.raises(uploads.UploadError, match="link"):
        uploads.safe_extract(_zip({"a.csv": b"x"}, link="allocations.csv"), tmp_path / "l")
    with pytest.raises(uploads.UploadError, match="bytes"):
        uploads.safe_extract(_zip({"allocations.csv": b"0" * 5000}), tmp_path / "b", max_bytes=1000)
    with pytest.raises(uploads.UploadError, match="members"):
        uploads.safe_extract(_zip({f"f{i}.csv": b"x" for i in range(5)}), tmp_path / "m", max_members=3)
    with pytest.raises(uploads.UploadError, match="zip"):
        uploads.safe_extract(b"not a zip", tmp_path / "z")


def test_stage_upload_of_a_zipped_bundle(tmp_path):
    src = write_html_bundle(tmp_path / "src")
    data = _zip({f"bundle/{p.name}": p.read_bytes() for p in src.iterdir()})
    staged = uploads.stage_upload([("bundle.zip", data)], root=tmp_path / "up")
    assert staged.root.name == "bundle" and staged.bundle["allocations"].height == 3
    comp = api.run(staged.root)
    assert EVIL_TENANT in views.rankings(comp, None, "tenant")["tenant"].to_list()


def test_stage_upload_checks(tmp_path):
    with pytest.raises(uploads.UploadError, match="limit"):
        uploads.stage_upload([("allocations.csv", b"x" * 100)], root=tmp_path, max_bytes=10)
    with pytest.raises(uploads.UploadError, match="accepted"):
        uploads.stage_upload([("run.sh", b"echo")], root=tmp_path)
    with pytest.raises(uploads.UploadError, match="allocations"):
        uploads.stage_upload([("owners.csv", b"tenant,project\na,b\n")], root=tmp_path)
    with pytest.raises(uploads.UploadError, match="name"):
        uploads.stage_upload([("../allocations.csv", b"x")], root=tmp_path)
    # Failed uploads leave nothing behind.
    assert not any(tmp_path.iterdir())


def test_an_upload_the_dashboard_could_not_open_is_refused_before_it_is_opened(tmp_path):
    """Issue 42 item 6. On main a zip whose ailedger.toml did not parse was accepted, and then
    every page (Data and Rules included) stopped on the config error until a reload; an empty
    allocations.csv was accepted, then every page read "Cannot open <server path>/uploads/...".
    Both are refused by stage_upload now, in words naming the file inside the upload and no
    server folder, and leave nothing behind. Item 12: a file named .zip that is not one says so
    in the project's words, not Python's "File is not a zip file"."""
    alloc = (SAMPLE / "allocations.csv").read_bytes()
    up = tmp_path / "up"
    with pytest.raises(uploads.UploadError) as broken:
        uploads.stage_upload([("b.zip", _zip({"fleet/allocations.csv": alloc, "fleet/ailedger.toml": b"[period\n"}))],
                             root=up)
    assert str(broken.value).startswith("fleet/ailedger.toml: not valid TOML")
    with pytest.raises(uploads.UploadError) as wrong:
        uploads.stage_upload([("b.zip", _zip({"fleet/allocations.csv": alloc,
                                              "fleet/ailedger.toml": b'[period]\nstart = "monday"\n'}))], root=up)
    assert "fleet/ailedger.toml: invalid config: period.start" in str(wrong.value)
    header = b"allocation_id,gpu_id,start,end,owner,source,workload\n"
    for content in (b"", header):
        with pytest.raises(uploads.UploadError, match=r"^allocations.csv holds no allocation: a bundle needs"):
            uploads.stage_upload([("allocations.csv", content)], root=up)
    with pytest.raises(uploads.UploadError) as not_zip:
        uploads.stage_upload([("fleet.zip", b"PK? no")], root=up)
    assert str(not_zip.value) == ("'fleet.zip' is not a zip archive (it cannot be unpacked); upload the bundle's "
                                  "files, or one .zip holding them")
    for exc in (broken.value, wrong.value, not_zip.value):
        assert str(tmp_path) not in str(exc) and "File is not a zip file" not in str(exc)
    assert not any(up.iterdir())


def test_a_source_is_shown_by_its_name_never_its_server_path(tmp_path, monkeypatch):
    monkeypatch.setenv("AILEDGER_UPLOAD_DIR", str(tmp_path / "uploads"))
    staged = uploads.stage_upload([("allocations.csv", (SAMPLE / "allocations.csv").read_bytes())])
    assert uploads.shown_source(staged.root) == f"upload {staged.root.name}"
    assert uploads.shown_source(tmp_path / "ledger.duckdb") == "ledger.duckdb"
    msg = uploads.without_paths(f"{staged.root}/allocations.csv: bad row", staged.root)
    assert msg == "allocations.csv: bad row"
    assert uploads.without_paths(f"cannot read {staged.root}", staged.root) == f"cannot read upload {staged.root.name}"


def test_check_source(tmp_path, db):
    assert uploads.check_source(SAMPLE) == SAMPLE
    assert uploads.check_source(db) == db
    with pytest.raises(uploads.UploadError):
        uploads.check_source(tmp_path / "missing")
    with pytest.raises(uploads.UploadError):
        uploads.check_source(tmp_path)
    (tmp_path / "x.duckdb").write_text("no")
    with pytest.raises(uploads.UploadError):
        uploads.check_source(tmp_path / "x.duckdb")


def test_save_aliases_rewrites_a_folder(tmp_path):
    folder = copy_sample(tmp_path / "fw")
    comp = api.run(folder)
    edited = views.alias_table(comp).with_columns(
        pl.when(pl.col("key") == "key-legacy-7").then(pl.lit("chat-assistant")).otherwise(pl.col("project")).alias("project")
    )
    result = uploads.save_aliases(folder, edited, principal=ADMIN)
    assert result.target.endswith("aliases.csv")
    after = api.run(folder)
    keys = [r["key"] for r in build_report(after)["unattributed"]]
    assert "key-legacy-7" not in keys and "acct_sandbox" in keys  # the one left empty stays unmapped
    with pytest.raises(uploads.UploadError):
        uploads.save_aliases(folder, pl.DataFrame({"source": ["gateway"], "key": [None], "project": ["x"]}),
                             principal=ADMIN)


def test_save_aliases_ingests_only_changes_into_a_store(tmp_path):
    db = make_store(tmp_path / "s")
    comp = api.run(db)
    before = store.data_version(db)
    edited = views.alias_table(comp).with_columns(
        pl.when(pl.col("key") == "acct_sandbox").then(pl.lit("eval-harness")).otherwise(pl.col("project")).alias("project")
    )
    result = uploads.save_aliases(db, edited, principal=ADMIN)
    assert result.written == 1 and store.data_version(db) != before
    after = api.run(db)
    assert "acct_sandbox" not in [r["key"] for r in build_report(after)["unattributed"]]
    assert uploads.save_aliases(db, edited, principal=ADMIN).written == 0  # nothing new: no ingest


def test_views_never_import_streamlit():
    import subprocess
    import sys

    code = ("import sys; import cost_engine.views, cost_engine.charts, cost_engine.exporters, "
            "cost_engine.exporters.review_pack, cost_engine.uploads; "
            "sys.exit(1 if 'streamlit' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent).returncode == 0


# ------------------------------------------------------------------ issue 42 item 2: select all


@pytest.fixture(scope="module")
def whole_days():
    """The sample under the dashboard's default period: whole local days 2026-10-06 .. 10-11 in
    Europe/Berlin (CEST, UTC+2), i.e. 2026-10-05T22:00Z .. 2026-10-11T22:00Z, 144 hours."""
    from cost_engine import period_choice
    from cost_engine.config import load_config

    base = load_config(SAMPLE / "ailedger.toml")
    full = api.run(SAMPLE, config=base)
    span = period_choice.DataSpan(full.period.start, full.period.end, full.period.timezone)
    chosen = period_choice.resolve("whole_days", span)
    start, end = span.window(chosen.first, chosen.last)
    assert (end - start).total_seconds() == 144 * 3600
    return api.run(SAMPLE, config=views.config_with(base, period_start=start, period_end=end))


def test_selecting_every_pool_says_what_it_leaves_out(whole_days):
    """On main, selecting all three pools turned 8,371.47 into 6,811.47 with no word. The one
    cost row without a pool is costs.csv's cost-direct-001, 1,820.00 USD over the week
    2026-10-05..12 (168 h) charged to PRJ-1004: the 144 h of the view hold 1,820 x 144 / 168
    = 1,560.00. The filter still keeps only what it names; left_out says the rest."""
    comp = whole_days
    everything = views.totals(comp)["cost"]
    pools = views.filter_options(comp)["pools"]
    assert pools == ["a100-infer", "a100-mig", "h100-train"]
    all_pools = views.Filters(pools=pools)
    lo = views.left_out(comp, all_pools)
    assert lo.rows() == [("pools", "costs without a pool", pytest.approx(1820 * 144 / 168))]
    assert views.totals(comp, all_pools)["cost"] == pytest.approx(everything - 1560.0)
    # An accelerator filter names cards: the direct cost is on none.
    accs = views.Filters(accelerators=views.filter_options(comp)["accelerators"])
    assert views.left_out(comp, accs)["amount"].to_list() == [pytest.approx(1560.0)]
    assert views.left_out(comp, views.NO_FILTERS).height == 0


@pytest.mark.parametrize("name", ["pools", "accelerators", "workloads", "tenants"])
def test_every_value_of_a_filter_plus_what_it_leaves_out_is_no_filter(whole_days, name):
    """For each sidebar filter: every value selected, plus the money left_out names, is the
    unfiltered total (the pool and accelerator part is the 1,560.00 above; the workload and
    tenant parts are idle capacity and unattributed money, which have neither)."""
    comp = whole_days
    everything = views.totals(comp)["cost"]
    f = views.Filters(**{name: views.filter_options(comp)[name]})
    kept = views.totals(comp, f)["cost"]
    lo = views.left_out(comp, f)
    assert lo["filter"].to_list() == [name]
    assert kept + lo["amount"].sum() == pytest.approx(everything, abs=1e-6)
    assert kept < everything
    # One value less: that value's money is left out too, and is not counted as "without".
    if name == "tenants":
        fewer = views.Filters(tenants=["product", "research"])
        assert views.left_out(comp, fewer)["amount"].to_list() == lo["amount"].to_list()


def test_every_value_of_every_filter_at_once_adds_up_too(whole_days):
    """All four filters with every value: a row lacking two dimensions is named once, under
    both (the direct charge cost-direct-001 has no pool, no card and no workload: its 1,560.00,
    see above), and the filtered total plus the lines is the unfiltered total."""
    comp = whole_days
    f = views.Filters(**views.filter_options(comp))
    lo = views.left_out(comp, f)
    assert lo["filter"][0] == "pools,accelerators,workloads" and lo["amount"][0] == pytest.approx(1560.0)
    assert lo["what"][0] == "costs without a pool or a card (so no accelerator) or a workload"
    assert lo["filter"].n_unique() == lo.height
    assert views.totals(comp, f)["cost"] + lo["amount"].sum() == pytest.approx(views.totals(comp)["cost"], abs=1e-6)
