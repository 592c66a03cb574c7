"""What every page shares: the open source, the sidebar (period, boundary, filters), the cached
computation and views, and the chart / table download helpers.

Caching: a computation is cached per (source path, data version, config JSON), where the data
version is `store.data_version` for a DuckDB store and the files' names, sizes and mtimes for a
bundle folder (plus the config file's), so an ingest or an edited file recomputes and nothing
else does. Views are cached per (that key, filters JSON, view name, arguments).

Pages only lay out: every number comes from `cost_engine.views` (through `Ctx.view`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from cost_engine import access, api, exporters, views
from cost_engine.config import BOUNDARY_PRESETS, Config, ConfigError, load_config
from cost_engine.engine import Computation
from cost_engine.report import build_report

DEFAULT_SOURCE = "sample_data/fleet-week"
SOURCE_KEY = "ailedger_source"  # session override of the source (Data page)
RULES_KEY = "ailedger_rules"  # session override of the rules (Rules page), config JSON
BOUNDARY_KEY, PERIOD_KEY = "sb_boundary", "sb_period"
FILTER_KEYS = {"pools": "sb_pools", "accelerators": "sb_accelerators", "workloads": "sb_workloads",
               "tenants": "sb_tenants"}
FILTER_LABELS = {"pools": "Pool", "accelerators": "Accelerator", "workloads": "Workload", "tenants": "Tenant"}


# ------------------------------------------------------------------------------------- source


def source_path() -> str:
    """The store or bundle the dashboard shows: the Data page's choice, AILEDGER_SOURCE, or the sample."""
    chosen = st.session_state.get(SOURCE_KEY)
    return chosen or os.environ.get("AILEDGER_SOURCE", DEFAULT_SOURCE)


def source_is_store(path: str) -> bool:
    return views.source_is_store(path)


def data_version(path: str) -> str:
    """A token that changes when the source's data or its config file change."""
    from cost_engine import store

    p = Path(path)
    parts: list[str] = []
    if p.is_file() and store.is_store(p):
        # While an ingest holds the store, keep serving the last version seen (its computation
        # is cached): readers never see half a batch, and the page does not hang on the lock.
        last_key = f"_ailedger_last_version:{p.resolve()}"
        try:
            version = store.data_version(p, wait_s=None if last_key not in st.session_state else 0.5)
            st.session_state[last_key] = version
        except store.StoreBusy:
            if last_key not in st.session_state:
                raise
            version = st.session_state[last_key]
        parts.append("store:" + version)
    elif p.is_dir():
        for f in sorted(p.iterdir()):
            if f.is_file():
                s = f.stat()
                parts.append(f"{f.name}:{s.st_size}:{s.st_mtime_ns}")
    elif p.exists():
        s = p.stat()
        parts.append(f"{s.st_size}:{s.st_mtime_ns}")
    cfg = api.find_config(p, None)
    if cfg is not None and cfg.exists():
        parts.append(f"config:{cfg.stat().st_mtime_ns}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


def file_config(path: str) -> Config:
    """The config found with the source (ailedger.toml in the folder / beside the store) or defaults."""
    return load_config(api.find_config(path, None))


# -------------------------------------------------------------------------------------- caches


@st.cache_resource(show_spinner="Computing the ledger…", max_entries=6)
def _full_computation(path: str, version: str, config_json: str) -> Computation:
    return api.run(path, config=Config.model_validate_json(config_json))


@st.cache_resource(show_spinner=False, max_entries=24)
def _computation(path: str, version: str, config_json: str) -> Computation:
    """The computation as the signed-in user may see it.

    `version` is `view_version()`: the data version plus the user's scope, so every cache keyed
    by it (views, report, exports) is per scope too and no user ever gets another's rows.
    """
    data_v, _, scope_key = version.partition("|")
    return access.scope(_full_computation(path, data_v, config_json), _principal_from_key(scope_key))


# ------------------------------------------------------------------------------------- access


@st.cache_resource(show_spinner=False)
def access_config(path: str | None) -> access.AccessConfig:
    return access.load_access(path)


def current_principal() -> access.Principal:
    """Who is looking, from the access config (AILEDGER_ACCESS): nobody configured = local admin.

    mode "header": a reverse proxy authenticated the user and sets the user and groups headers.
    mode "oidc": Streamlit's own login (st.login) with the provider in .streamlit/secrets.toml.
    A user with no grant is stopped here, before any figure is computed.
    """
    cfg = access_config(os.environ.get("AILEDGER_ACCESS"))
    user, groups = None, []
    if cfg.mode == "header":
        headers = st.context.headers
        try:  # every value of every header: one sent twice is refused, not read first-wins
            user, groups = access.identity_from_headers(cfg, [(k, v) for k in headers for v in headers.get_all(k)])
        except access.AccessError as exc:
            st.error(f"No access: {exc}")
            st.stop()
    elif cfg.mode == "oidc":
        if not st.user.is_logged_in:
            st.title("ailedger")
            st.button("Log in", on_click=st.login, type="primary")
            st.stop()
        user = st.user.get("email") or st.user.get("sub")
        groups = list(st.user.get("groups") or [])
    try:
        return access.principal_for(cfg, user, groups)
    except access.AccessError as exc:
        st.error(f"No access: {exc}")
        st.stop()
        raise  # st.stop() raises; this keeps type checkers honest


def scope_key(principal: access.Principal) -> str:
    return "*" if principal.is_admin else json.dumps(sorted(principal.tenants or ()))


def _principal_from_key(key: str) -> access.Principal:
    if key in ("", "*"):
        return access.Principal("admin", None)
    return access.Principal("scoped", frozenset(json.loads(key)))


def is_admin() -> bool:
    return current_principal().is_admin


def view_version(path: str) -> str:
    """The cache key of what this user sees: data version | scope."""
    return data_version(path) + "|" + scope_key(current_principal())


@st.cache_data(show_spinner=False, max_entries=8)
def _report(path: str, version: str, config_json: str) -> dict:
    return build_report(_computation(path, version, config_json))


@st.cache_data(show_spinner=False, max_entries=512)
def _view(path: str, version: str, config_json: str, filters_json: str, name: str, args_json: str) -> Any:
    comp = _computation(path, version, config_json)
    filters = views.Filters.model_validate_json(filters_json)
    call = json.loads(args_json)
    return getattr(views, name)(comp, filters, *call["args"], **call["kwargs"])


@st.cache_data(show_spinner=False, max_entries=32)
def _overview_figures(path: str, version: str, config_json: str, filters_json: str) -> dict:
    from cost_engine.exporters import review_pack

    comp = _computation(path, version, config_json)
    return review_pack.overview_figures(comp, views.Filters.model_validate_json(filters_json))


@st.cache_data(show_spinner=False, max_entries=16)
def _budget_views(path: str, version: str, config_json: str, now_iso: str) -> dict:
    from cost_engine import alerts, budgets, burn

    comp = _computation(path, version, config_json)
    rep = budgets.evaluate(comp, now=datetime.fromisoformat(now_iso))
    return {"as_of": rep.as_of, "status": rep.status, "path": rep.path, "inactive": rep.inactive,
            "alerts": alerts.evaluate(comp, rep), "burn": burn.burn_rate(comp, rep.live_at), "live_at": rep.live_at}


def base_computation(ctx: "Ctx") -> Computation:
    """The computation under the source's own rules and whole period (what budgets read)."""
    return _computation(ctx.path, ctx.version, ctx.base_config.model_dump_json())


def budget_views(ctx: "Ctx") -> dict:
    """Budgets, their day-by-day burn-down, alerts and burn rates of the open source (engine:
    budgets.evaluate, alerts.evaluate, burn.burn_rate), under the source's own rules and whole
    period (the sidebar's period, boundary and filters are views of spend, not of budgets).
    The report time follows the clock, to the hour, when the data runs into the present."""
    now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    return _budget_views(ctx.path, ctx.version, ctx.base_config.model_dump_json(), now.isoformat())


def computation(config: Config | None = None) -> Computation:
    """The computation of the open source under a config (default: the source's own)."""
    path = source_path()
    cfg = config or file_config(path)
    return _computation(path, view_version(path), cfg.model_dump_json())


def report(config: Config | None = None) -> dict:
    path = source_path()
    cfg = config or file_config(path)
    return _report(path, view_version(path), cfg.model_dump_json())


# ------------------------------------------------------------------------------------- context


@dataclass(frozen=True)
class Ctx:
    """What a page needs: the source, the effective config and filters, and cached views."""

    path: str
    version: str
    config: Config
    filters: views.Filters
    base_config: Config

    @property
    def config_json(self) -> str:
        return self.config.model_dump_json()

    @property
    def comp(self) -> Computation:
        return _computation(self.path, self.version, self.config_json)

    @property
    def currency(self) -> str:
        return self.comp.period.currency

    @property
    def timezone(self) -> str:
        return self.comp.period.timezone

    @property
    def is_store(self) -> bool:
        return source_is_store(self.path)

    def report(self) -> dict:
        """build_report of the (unfiltered) computation under the effective config."""
        return _report(self.path, self.version, self.config_json)

    def view(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """views.<name>(comp, filters, *args, **kwargs), cached per data version, config and filters."""
        return _view(self.path, self.version, self.config_json, self.filters.key(), name,
                     json.dumps({"args": args, "kwargs": kwargs}, default=str, sort_keys=True))

    def overview_figures(self) -> dict:
        """The Overview's figures (the same the review pack renders), cached."""
        return _overview_figures(self.path, self.version, self.config_json, self.filters.key())

    def raw(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """views.<name>(comp, *args) for views that take no filters (uncached, cheap)."""
        return getattr(views, name)(self.comp, *args, **kwargs)


def _base(path: str, version: str) -> Config:
    override = st.session_state.get(RULES_KEY)
    if override:
        try:
            return Config.model_validate_json(override)
        except Exception:  # a stale override from another source: drop it
            st.session_state.pop(RULES_KEY, None)
    return file_config(path)


def _default_state(comp: Computation, base: Config) -> None:
    ss = st.session_state
    first, last = views.period_days(comp)
    period = ss.get(PERIOD_KEY)
    if period is not None and not (
        isinstance(period, (list, tuple)) and all(isinstance(d, date) and first <= d <= last for d in period)
    ):
        ss[PERIOD_KEY] = (first, last)  # stale (another source) or malformed
    for key in FILTER_KEYS.values():
        ss.setdefault(key, [])


def _effective(comp: Computation, base: Config) -> tuple[Config, views.Filters]:
    ss = st.session_state
    cfg = base
    boundary = ss.get(BOUNDARY_KEY, base.boundary.name)
    if boundary and boundary != base.boundary.name and boundary in BOUNDARY_PRESETS:
        cfg = views.config_with(cfg, boundary=boundary)
    period = ss.get(PERIOD_KEY)
    first, last = views.period_days(comp)
    if isinstance(period, (list, tuple)) and len(period) == 2 and all(isinstance(d, date) for d in period):
        start, end = period
        if (start, end) != (first, last):
            cfg = views.period_config(cfg, comp, max(start, first), min(end, last))
    options = views.filter_options(comp)
    chosen = {}
    for name, key in FILTER_KEYS.items():
        vals = [v for v in (ss.get(key) or []) if v in options[name]]
        chosen[name] = vals
    return cfg, views.Filters(**chosen)


def through_router() -> bool:
    """Make sure a page runs under app.py's router and sidebar; True when this call drew the sidebar.

    A `pages/` folder beside app.py starts Streamlit in its legacy multipage mode until the
    router's st.navigation runs once: a first request for /rankings on a fresh server would run
    the page alone (no sidebar, the legacy page list). Under a server, switch the mode off and
    rerun: the rerun goes through app.py, which opens the same page. Under AppTest (no runtime;
    it restarts in that mode on every run, and a rerun would drop a clicked button's value),
    draw the shared sidebar here instead.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if not (PagesManager.uses_pages_directory and _under_server()):
        return False
    PagesManager.uses_pages_directory = False
    if not _under_apptest():
        st.rerun()
    sidebar()
    return True


def _under_apptest() -> bool:
    """AppTest runs scripts against a mocked Runtime (streamlit.testing.v1.app_test)."""
    from streamlit.runtime import Runtime

    return Runtime.exists() and type(Runtime.instance()).__module__.startswith("unittest.mock")


def _under_server() -> bool:
    """True when the script runs under Streamlit with app.py as its main script."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        main = ctx.pages_manager.main_script_path if ctx is not None else None
    except Exception:  # noqa: BLE001 - outside Streamlit
        return False
    return main is not None and Path(main).name == "app.py"


def context() -> Ctx:
    """The page context from the sidebar's state (defaults when a page runs on its own)."""
    through_router()
    path = source_path()
    version = view_version(path)
    try:
        base = _base(path, version)
    except ConfigError as exc:
        st.error(f"The source's config is invalid: {exc}")
        st.stop()
    try:
        base_comp = _computation(path, version, base.model_dump_json())
    except Exception as exc:  # noqa: BLE001 - shown to the user, not swallowed
        st.error(f"Cannot open {path}: {exc}")
        st.info("Open another source on the Data page.")
        if st.session_state.get(SOURCE_KEY):
            if st.button("Back to the default source"):
                st.session_state.pop(SOURCE_KEY, None)
                st.rerun()
        st.stop()
    _default_state(base_comp, base)
    cfg, filters = _effective(base_comp, base)
    return Ctx(path=path, version=version, config=cfg, filters=filters, base_config=base)


def sidebar() -> Ctx | None:
    """The sidebar every page shares: source, period, boundary and the four filters."""
    path = source_path()
    version = view_version(path)
    try:
        base = _base(path, version)
        comp = _computation(path, version, base.model_dump_json())
    except Exception:  # noqa: BLE001 - the page shows the error
        with st.sidebar:
            st.caption(f"Source: `{Path(path).name}` (cannot be read)")
        return None
    _default_state(comp, base)
    options = views.filter_options(comp)
    first, last = views.period_days(comp)
    with st.sidebar:
        kind = "DuckDB store" if source_is_store(path) else "bundle folder"
        st.caption(f"Source: **{Path(path).name}** ({kind})")
        st.date_input("Period", value=(first, last), min_value=first, max_value=last, key=PERIOD_KEY,
                      help=f"Whole days in {comp.period.timezone}; the figures are recomputed for the days chosen.")
        presets = list(BOUNDARY_PRESETS)
        if base.boundary.name not in presets:
            presets.append(base.boundary.name)
        if st.session_state.get(BOUNDARY_KEY, base.boundary.name) not in presets:
            st.session_state.pop(BOUNDARY_KEY, None)
        current = st.session_state.get(BOUNDARY_KEY, base.boundary.name)
        st.selectbox("Cost boundary", presets, index=presets.index(current), key=BOUNDARY_KEY,
                     help="Which cost categories count (presets of the data contract; the Rules page sets custom ones).")
        st.markdown("**Filters** (every page)")
        for name, key in FILTER_KEYS.items():
            st.session_state[key] = [v for v in st.session_state.get(key, []) if v in options[name]]
            st.multiselect(FILTER_LABELS[name], options[name], key=key, placeholder="all")
        if any(st.session_state.get(k) for k in FILTER_KEYS.values()):
            st.button("Clear filters", on_click=_clear_filters, type="tertiary")
        if st.session_state.get(RULES_KEY):
            st.caption("Rules from the Rules page are in force.")
            st.button("Back to the source's rules", on_click=lambda: st.session_state.pop(RULES_KEY, None),
                      type="tertiary")
    cfg, filters = _effective(comp, base)
    return Ctx(path=path, version=version, config=cfg, filters=filters, base_config=base)


def _clear_filters() -> None:
    for key in FILTER_KEYS.values():
        st.session_state[key] = []


def header(ctx: Ctx, title: str) -> None:
    """Page title and one caption line: period, boundary, filters."""
    st.title(title)
    p = ctx.comp.period
    tz = p.timezone
    start = p.start.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M")
    end = p.end.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M")
    st.caption(
        f"{start} – {end} ({tz}) · boundary **{ctx.config.boundary.name}** · {p.currency} · "
        f"{ctx.filters.describe()}"
    )


# ---------------------------------------------------------------------------------- formatting


def fmt(value: float | None, unit: str) -> str:
    return views.format_value(value, unit)


def kpi_row(ctx: Ctx, keys: list[str], cards: pl.DataFrame | None = None) -> None:
    """One row of st.metric cards from views.kpi_cards (unit in the label, exact value in the help)."""
    cards = cards if cards is not None else ctx.view("kpi_cards")
    by_key = {r["key"]: r for r in cards.iter_rows(named=True)}
    cols = st.columns(len(keys))
    for col, key in zip(cols, keys):
        r = by_key[key]
        label = r["label"]  # views.kpi_cards labels carry their unit
        exact = "" if r["value"] is None or r["unit"] == "ratio" else f" Exact: {r['value']:,.6g}."
        col.metric(md(label), fmt(r["value"], r["unit"]), help=md(r["detail"]) + exact, border=True)


# ----------------------------------------------------------------------------------- downloads


def chart(fig: go.Figure, key: str, *, name: str | None = None, height: int | None = None) -> None:
    """A Plotly chart with PNG, SVG and HTML downloads (images render only when clicked)."""
    if height:
        fig.update_layout(height=height)
    st.plotly_chart(fig, key=f"chart_{key}", config={"displaylogo": False})
    base = exporters.safe_name(name or key)
    ok = exporters.available()
    why = None if ok else "PNG/SVG need Chromium (kaleido); the HTML download works without it."
    with st.container(horizontal=True, key=f"dl_{key}", gap="small"):
        st.download_button("PNG", data=lambda f=fig: exporters.to_png(f), file_name=f"{base}.png", mime="image/png",
                           key=f"png_{key}", on_click="ignore", disabled=not ok, help=why, icon=":material/image:")
        st.download_button("SVG", data=lambda f=fig: exporters.to_svg(f), file_name=f"{base}.svg",
                           mime="image/svg+xml", key=f"svg_{key}", on_click="ignore", disabled=not ok, help=why,
                           icon=":material/draw:")
        st.download_button("HTML", data=lambda f=fig: exporters.to_html(f, title=name or key),
                           file_name=f"{base}.html", mime="text/html", key=f"html_{key}", on_click="ignore",
                           icon=":material/code:")


def table(frame: pl.DataFrame, key: str, *, name: str | None = None, column_config: dict | None = None,
          height: int | str = "auto", **kwargs: Any) -> Any:
    """st.dataframe with CSV and Parquet downloads of the same table; returns the dataframe's state.
    `column_config` adds to (or overrides) the formats chosen by column name."""
    config = {**_auto_config(frame), **(column_config or {})}
    state = st.dataframe(frame, key=f"table_{key}", hide_index=True, column_config=config, height=height, **kwargs)
    base = exporters.safe_name(name or key)
    with st.container(horizontal=True, key=f"dlt_{key}", gap="small"):
        st.download_button("CSV", data=lambda f=frame: exporters.table_csv(f), file_name=f"{base}.csv",
                           mime="text/csv", key=f"csv_{key}", on_click="ignore", icon=":material/table:")
        st.download_button("Parquet", data=lambda f=frame: exporters.table_parquet(f), file_name=f"{base}.parquet",
                           mime="application/vnd.apache.parquet", key=f"pq_{key}", on_click="ignore",
                           icon=":material/database:")
    return state


_MONEY = ("cost", "attributed_cost", "recharged_cost", "inference_cost", "energy_cost", "cost_a", "cost_b",
          "difference", "amount", "input_cost", "attributed", "idle", "unattributed")


_LABELS = {
    "allocated_gpu_hours": "allocated GPU-h", "active_gpu_hours": "active GPU-h", "covered_gpu_hours": "covered GPU-h",
    "uncovered_gpu_hours": "no-telemetry GPU-h", "idle_gpu_hours": "idle GPU-h", "gpu_hours": "GPU-h",
    "energy_kwh_gpu": "GPU kWh", "energy_kwh_facility": "facility kWh", "avg_util_pct": "avg util %",
    "cost_per_million_tokens": "$/1M tokens", "cost_per_million_input_tokens": "$/1M input",
    "cost_per_million_output_tokens": "$/1M output", "cost_per_million_good_tokens": "$/1M good",
    "cost_per_allocated_gpu_hour": "$/allocated GPU-h", "slo_attainment": "SLO attainment",
    "cache_hit_rate": "cache hit rate", "error_share": "errors", "output_tokens_per_joule": "out tokens/J",
    "output_tokens_per_joule_facility": "out tokens/J (facility)", "display_name": "name",
    "attributed_cost": "attributed cost", "recharged_cost": "recharged cost", "inference_cost": "inference cost",
    "input_tokens": "input tokens", "cached_input_tokens": "cached tokens", "output_tokens": "output tokens",
    "good_tokens": "good tokens", "share_of_idle": "share of idle", "top_offenders": "top offenders",
    "co2e_kg": "kg CO2e", "energy_cost": "energy cost", "vs_target": "vs target", "meets_target": "meets target",
    "input_share": "input share", "cached_share": "cached share", "output_share": "output share",
    "a": "A (current)", "b": "B (edited)", "cost_a": "cost under A", "cost_b": "cost under B",
}
_PERCENT = ("idle_rate", "coverage", "share_of_idle", "slo_attainment", "cache_hit_rate", "error_share",
            "input_share", "cached_share", "output_share", "change", "allocation_rate")


def _auto_config(frame: pl.DataFrame) -> dict:
    """Readable headers and number formats by column name (money 2 decimals, hours 1, shares as %).
    Only the display changes: the CSV / Parquet downloads keep the engine's column names."""
    cfg: dict[str, Any] = {}
    for name, dtype in frame.schema.items():
        label = _LABELS.get(name, name.replace("_", " "))
        if dtype == pl.Date:
            cfg[name] = st.column_config.DateColumn(label, format="YYYY-MM-DD ddd")
            continue
        if isinstance(dtype, pl.Datetime):
            cfg[name] = st.column_config.DatetimeColumn(label, format="YYYY-MM-DD HH:mm:ss")
            continue
        if not dtype.is_numeric():
            cfg[name] = st.column_config.Column(label)
            continue
        if name in _PERCENT:
            cfg[name] = st.column_config.NumberColumn(label, format="percent")
        elif name.startswith("cost_per") or name in ("vs_target", "target"):
            cfg[name] = st.column_config.NumberColumn(label, format="%.3f")
        elif name in _MONEY or name.endswith("_cost") or name.startswith("cost_"):
            cfg[name] = st.column_config.NumberColumn(label, format="%.2f")
        elif (name.endswith("gpu_hours") or name.startswith("energy_kwh") or name.endswith("_kw") or name == "co2e_kg"
              or name.endswith("_pct") or name == "gpu_hours"):
            cfg[name] = st.column_config.NumberColumn(label, format="%.1f")
        elif name.endswith("per_joule") or name.endswith("per_joule_facility"):
            cfg[name] = st.column_config.NumberColumn(label, format="%.5f")
        elif name.endswith("tokens") or name in ("requests", "records", "accepted", "rejected"):
            cfg[name] = st.column_config.NumberColumn(label, format="localized")
        else:
            cfg[name] = st.column_config.NumberColumn(label)
    return cfg


def money_columns(frame: pl.DataFrame, names: list[str]) -> dict:
    """The table's usual column config with `names` shown as money (2 decimals, sign kept)."""
    cfg = _auto_config(frame)
    for n in names:
        if n in frame.columns:
            cfg[n] = st.column_config.NumberColumn(_LABELS.get(n, n.replace("_", " ")), format="%+.2f")
    return cfg


def selected_row(state: Any) -> int | None:
    """The selected row index of an st.dataframe with single-row selection, or None."""
    try:
        rows = state.selection.rows
    except AttributeError:
        try:
            rows = state["selection"]["rows"]
        except (KeyError, TypeError):
            return None
    return rows[0] if rows else None


_MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~$&:\"'=^")


def md(text: object) -> str:
    """Data text made inert for Streamlit markdown (labels, captions): every markdown, HTML and
    LaTeX character backslash-escaped, so a name always shows as the literal text."""
    s = "" if text is None else str(text)
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s).replace("\n", " ")
