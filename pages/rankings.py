"""Rankings: tenants, projects and models, with a drill-down to the raw records behind a figure;
idle treatment and inference recharge beside the ranking (they change every page: link state).

Drill state lives in the URL with the shared view keys (shareable, reopens at the same place;
coming back to the page, by the sidebar or the browser's back button, finds the same level):
    ?level=tenants[&rank=tenant|project|model][&sort=cost|gpu_hours|tokens|cost_per_million_tokens]
    ?level=projects&tenant=T
    ?level=project&tenant=T&project=P
    ?level=records&tenant=T[&project=P][&model=M][&table=allocations|requests|costs][&page=N]
    ?level=records&model=M           (a model's serving records)
"""

from __future__ import annotations

import polars as pl
import streamlit as st

from cost_engine import charts, labels, views
from pages import common

ctx = common.context()
common.header(ctx, "Rankings")

LEVELS = ("tenants", "projects", "project", "records")
RANKS = ("tenant", "project", "model")
SORT_LABELS = {"cost": "Cost", "gpu_hours": "GPU-hours", "tokens": "Tokens",
               "cost_per_million_tokens": "$ per 1M tokens"}
SORT_COLUMN = {"cost": "cost", "gpu_hours": "allocated_gpu_hours", "tokens": "tokens",
               "cost_per_million_tokens": "cost_per_million_tokens"}
TABLES = {"allocations": "Allocations", "requests": "Requests", "costs": "Cost rows"}
PAGE_SIZES = (25, 50, 100, 200)

qp = st.query_params
ss = st.session_state
ss.setdefault("drill_nonce", 0)
nonce = ss["drill_nonce"]


def nav(**params: object) -> None:
    """Move the drill-down: the page's keys replaced, the shared view keys kept (one URL
    update), fresh table widgets (no stale selection)."""
    ss["drill_nonce"] = ss.get("drill_nonce", 0) + 1
    common.set_page_params(**params)


def rules_beside() -> None:
    """Idle treatment and inference recharge, next to the figures they move (link state)."""
    a = ctx.config.allocation
    with st.container(horizontal=True, key="ranking_rules", gap="medium", vertical_alignment="bottom"):
        ss["rk_idle"], ss["rk_recharge"] = a.idle, a.inference_recharge
        st.segmented_control("Idle capacity", ["separate", "proportional"], key="rk_idle", required=True,
                             format_func=labels.IDLE_TREATMENT.get,
                             on_change=lambda: common.set_rules(idle=ss["rk_idle"]),
                             help="separate: idle cost is its own line (by cause, on the Idle page); proportional: "
                                  "each pool's idle cost is charged to its owners by GPU-hours.")
        st.segmented_control("Inference recharge", ["tokens", "requests", "none"], key="rk_recharge", required=True,
                             format_func=lambda r: labels.RECHARGE[r].capitalize(),
                             on_change=lambda: common.set_rules(inference_recharge=ss["rk_recharge"]),
                             help="Move the cost of serving a model onto the projects that sent the requests.")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


level = qp.get("level", "tenants")
tenant, project, model = qp.get("tenant"), qp.get("project"), qp.get("model")
if level not in LEVELS or (level == "projects" and not tenant) or (level == "project" and not (tenant and project)) \
        or (level == "records" and not (tenant or model)):
    level = "tenants"

# ---- breadcrumb ---------------------------------------------------------------------------
crumbs: list[tuple[str, dict]] = [("All owners", {"level": "tenants", "rank": qp.get("rank"), "sort": qp.get("sort")})]
if tenant and level != "tenants":
    crumbs.append((f"tenant {tenant}", {"level": "projects", "tenant": tenant}))
if project and level in ("project", "records"):
    crumbs.append((f"project {project}", {"level": "project", "tenant": tenant, "project": project}))
if model and level == "records":
    crumbs.append((f"model {model}", {"level": "records", "tenant": tenant, "project": project, "model": model}))
if level == "records":
    crumbs.append(("raw records", {}))
with st.container(horizontal=True, key="breadcrumb", vertical_alignment="center", gap="xsmall"):
    for i, (text, target) in enumerate(crumbs):
        last = i == len(crumbs) - 1
        if i:
            st.markdown("›")
        st.button(common.md(text), key=f"crumb_{i}_{nonce}", type="tertiary", disabled=last,
                  on_click=nav, kwargs=target)


def owner_metrics(row: dict) -> None:
    cur = ctx.currency
    g = common.metric_grid(5, "owner_metrics")
    g.metric(f"Cost ({cur})", common.fmt(row.get("cost"), cur), border=True)
    g.metric("Allocated GPU-hours", common.fmt(row.get("allocated_gpu_hours"), "GPU-h"), border=True)
    g.metric("Active GPU-hours", common.fmt(row.get("active_gpu_hours"), "GPU-h"), border=True)
    g.metric("Tokens sent", common.fmt(float(row.get("tokens") or 0), "tokens"), border=True)
    g.metric(f"{cur} per 1M tokens", common.fmt(row.get("cost_per_million_tokens"), cur), border=True,
                help="What the owner paid for inference (recharged model cost) per million tokens it sent.")


def lineage_caption(**who: str | None) -> None:
    s = ctx.view("lineage_summary", **who)
    st.caption(
        f"Made from {s['allocations']:,} allocations, {s['requests']:,} requests and {s['costs']:,} cost rows "
        f"carrying {s['total_cost']:,.2f} {ctx.currency}."
    )


rules_beside()

# ---- level: rankings ----------------------------------------------------------------------
if level == "tenants":
    rank = qp.get("rank", "tenant")
    rank = rank if rank in RANKS else "tenant"
    sort = qp.get("sort", "cost")
    sort = sort if sort in SORT_LABELS else "cost"
    c1, c2 = st.columns([3, 2])

    def _rank_sort() -> None:
        # A callback, so the URL (and the sidebar's link, and this page's memory) hold the new
        # ranking before the run that draws it starts.
        common.set_page_params(level="tenants", rank=ss.get(f"rank_{nonce}") or rank,
                               sort=ss.get(f"sort_{nonce}") or sort)

    # The widgets show the URL's ranking (set before they are drawn: a link or the back button
    # may have changed it since they last reported).
    ss[f"rank_{nonce}"], ss[f"sort_{nonce}"] = rank, sort
    c1.segmented_control("Rank", RANKS, key=f"rank_{nonce}", required=True, on_change=_rank_sort,
                         format_func=lambda r: {"tenant": "Tenants", "project": "Projects", "model": "Models"}[r])
    c2.selectbox("Sort by", list(SORT_LABELS), on_change=_rank_sort,
                 format_func=SORT_LABELS.get, key=f"sort_{nonce}")
    frame: pl.DataFrame = ctx.view("rankings", rank, sort)
    name_col = {"tenant": "tenant", "project": "project", "model": "model"}[rank]
    unit = ctx.currency if sort == "cost" else ("GPU-hours" if sort == "gpu_hours" else
                                                ("tokens" if sort == "tokens" else f"{ctx.currency} / 1M tokens"))
    common.chart(
        charts.ranking_bar(frame, name_col, SORT_COLUMN[sort],
                           f"{rank.capitalize()} ranking by {SORT_LABELS[sort]} ({ctx.config.boundary.name})", unit),
        f"ranking_{rank}", name=f"{rank}-ranking",
    )
    st.caption(f"Select a row to drill into a {rank}.")
    shown = {
        "tenant": ["tenant", "cost", "allocated_gpu_hours", "active_gpu_hours", "avg_util_pct", "tokens",
                   "cost_per_million_tokens", "energy_kwh_gpu"],
        "project": ["tenant", "project", "display_name", "cost", "allocated_gpu_hours", "active_gpu_hours", "tokens",
                    "cost_per_million_tokens", "energy_kwh_gpu"],
        "model": ["model", "cost", "allocated_gpu_hours", "tokens", "cost_per_million_tokens",
                  "cost_per_million_input_tokens", "cost_per_million_output_tokens", "cost_per_million_good_tokens",
                  "slo_attainment"],
    }[rank]
    state = common.table(frame.select([c for c in shown if c in frame.columns]), f"rank_{rank}_{nonce}",
                         name=f"{rank}-ranking", on_select="rerun", selection_mode="single-row")
    i = common.selected_row(state)
    if i is not None and i < frame.height:
        row = frame.row(i, named=True)
        if rank == "tenant":
            nav(level="projects", tenant=row["tenant"])
        elif rank == "project":
            nav(level="project", tenant=row["tenant"], project=row["project"])
        else:
            nav(level="records", model=row["model"])
        st.rerun()

# ---- level: a tenant's projects -----------------------------------------------------------
elif level == "projects":
    tenants = ctx.view("rankings", "tenant")
    trow = tenants.filter(pl.col("tenant") == tenant)
    st.subheader(f"Projects of {common.md(tenant)}")
    if trow.height == 0:
        st.warning(f"No tenant {common.md(tenant)} in this selection (check the sidebar filters).")
    else:
        owner_metrics(trow.row(0, named=True))
    lineage_caption(tenant=tenant)
    frame = ctx.view("rankings", "project", "cost", tenant)
    common.chart(charts.ranking_bar(frame, "project", "cost", f"Projects of {charts.label(tenant)} by cost ({charts.label(ctx.currency)})",
                                    ctx.currency),
                 "tenant_projects", name=f"projects-of-{tenant}")
    st.caption("Select a project for its models, jobs and services.")
    state = common.table(
        frame.select("project", "display_name", "cost", "allocated_gpu_hours", "active_gpu_hours", "tokens",
                     "cost_per_million_tokens", "energy_kwh_gpu"),
        f"projects_{nonce}", name=f"projects-of-{tenant}", on_select="rerun", selection_mode="single-row",
    )
    i = common.selected_row(state)
    if i is not None and i < frame.height:
        nav(level="project", tenant=tenant, project=frame.row(i, named=True)["project"])
        st.rerun()
    st.button("Raw records of this tenant", icon=":material/list_alt:", key=f"tenant_records_{nonce}",
              on_click=nav, kwargs={"level": "records", "tenant": tenant})

# ---- level: one project -------------------------------------------------------------------
elif level == "project":
    prow = ctx.view("rankings", "project", "cost", tenant).filter(pl.col("project") == project)
    title = f"Project {project}"
    if prow.height and prow["display_name"][0]:
        title += f" ({prow['display_name'][0]})"
    st.subheader(common.md(title))
    if prow.height == 0:
        st.warning("No such project in this selection (check the sidebar filters).")
    else:
        owner_metrics(prow.row(0, named=True))
    lineage_caption(tenant=tenant, project=project)
    st.button("Raw records (allocations, requests, cost rows)", icon=":material/list_alt:", type="primary",
              key=f"project_records_{nonce}", on_click=nav,
              kwargs={"level": "records", "tenant": tenant, "project": project})

    st.markdown("#### Models")
    st.caption("Cost the project paid for each model (inference recharged by its tokens) and the tokens it sent. "
               "Select a model for its records.")
    models = ctx.view("project_models", tenant, project)
    if models.height == 0:
        st.info("This project sent no requests and serves no model.")
    else:
        state = common.table(models, f"project_models_{nonce}", name=f"models-of-{project}", on_select="rerun",
                             selection_mode="single-row")
        i = common.selected_row(state)
        if i is not None and i < models.height:
            nav(level="records", tenant=tenant, project=project, model=models.row(i, named=True)["model"])
            st.rerun()
    st.markdown("#### Jobs")
    jobs = ctx.view("project_jobs", tenant, project)
    if jobs.height == 0:
        st.info("No training, batch or interactive jobs in this selection.")
    else:
        common.table(jobs, f"project_jobs_{nonce}", name=f"jobs-of-{project}")
    st.markdown("#### Services")
    services = ctx.view("project_services", tenant, project)
    if services.height == 0:
        st.info("This project holds no inference service allocations (its inference cost is recharged from "
                "the services it calls).")
    else:
        common.table(services, f"project_services_{nonce}", name=f"services-of-{project}")

    idle_here = ctx.view("owner_idle", tenant, project)
    if idle_here.height:
        st.markdown("#### Idle on this project's allocations")
        st.caption("Held idle: time the project held cards below the activity rule, by cause. Open a cause on the "
                   "Idle page for its cards, allocations and telemetry.")
        common.table(idle_here.with_columns(pl.Series("open", [
            ctx.link("idle", cause=r["cause"], kind=r["kind"], owner=project) for r in idle_here.iter_rows(named=True)
        ])), f"project_idle_{nonce}", name=f"idle-of-{project}", title=f"Idle held by {project}",
            column_config={"open": st.column_config.LinkColumn("Idle page", display_text="open the cause ›")})

# ---- level: raw records -------------------------------------------------------------------
else:
    who = {"tenant": tenant, "project": project, "model": model}
    label = " / ".join(f"{k} {v}" for k, v in who.items() if v)
    st.subheader(f"Raw records: {common.md(label)}")
    lineage_caption(**who)
    table_name = qp.get("table", "allocations")
    table_name = table_name if table_name in TABLES else "allocations"
    size = _int(qp.get("size"), 50)
    size = size if size in PAGE_SIZES else 50
    c1, c2 = st.columns([3, 1])
    new_table = c1.segmented_control("Records", list(TABLES), default=table_name, format_func=TABLES.get,
                                     required=True, key=f"records_table_{nonce}")
    new_size = c2.selectbox("Rows per page", PAGE_SIZES, index=PAGE_SIZES.index(size), key=f"records_size_{nonce}")
    if (new_table or table_name) != table_name or new_size != size:
        nav(**who, level="records", table=new_table or table_name, size=new_size, page=1)
        st.rerun()
    page_no = max(1, _int(qp.get("page"), 1))
    page: views.RecordsPage = ctx.view("records", ctx.path, table=table_name, page=page_no - 1, page_size=size, **who)
    st.caption(
        f"{TABLES[table_name]}: {page.total:,} records · page {page.page + 1} of {page.pages}"
        + {"store": " · read from the DuckDB store", "memory": " · read from the bundle",
           "scoped": " · your tenants' own rows, and their share of rows shared with other tenants"}[page.backend]
        + (" · Attributed cost: what each record contributed to this figure; Via: how it got there (own use, "
           "recharge from the owner serving a model, idle share, the driver that shared a cost)"
           if table_name != "requests" else "")
    )
    if page.total == 0:
        st.info(f"No {TABLES[table_name].lower()} behind this figure.")
    else:
        common.table(page.rows, f"records_{table_name}_{page.page}_{nonce}",
                     name=f"{table_name}-{label}-page{page.page + 1}")
    prev_col, next_col, _ = st.columns([1, 1, 6])
    base = {**who, "level": "records", "table": table_name, "size": size}
    prev_col.button("Previous", key=f"prev_{nonce}", disabled=page.page == 0, icon=":material/chevron_left:",
                    on_click=nav, kwargs={**base, "page": page.page})
    next_col.button("Next", key=f"next_{nonce}", disabled=page.page + 1 >= page.pages,
                    icon=":material/chevron_right:", on_click=nav, kwargs={**base, "page": page.page + 2})
