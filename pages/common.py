"""What every page shares: the open source, the view state (period, granularity, comparison,
rules, filters) kept in the URL, the sidebar, the cached computations and views, and the chart
/ table downloads that say what they show.

URL: `cost_engine.view_state` parses and writes the shared keys; a link holding them reopens
the same view in a fresh browser, a page switch (which drops the query) keeps the session's
state, and a page's own keys (drill level, cause, card) are remembered per page, so coming
back to a page finds it where it was left.

Caching: the source is read once per (path, data version) and each rule set / period computes
from it (`_full_computation`), per (source path, data version, config JSON); the data version
is `store.data_version` for a DuckDB store and the files' names, sizes and mtimes for a bundle
folder (plus the config file's), so an ingest or an edited file recomputes and nothing else
does. Views are cached per (that key, filters JSON, view name, arguments).

Pages only lay out: every number comes from `cost_engine` (through `Ctx.view`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from cost_engine import (access, api, audit, exporters, exports_meta, idle_owners, labels, period_choice,
                         period_views, uploads, view_state, views)
from cost_engine.config import Config, load_config
from cost_engine.engine import Computation, compute
from cost_engine.report import build_report

log = logging.getLogger("ailedger.dashboard")

DEFAULT_SOURCE = "sample_data/fleet-week"
SOURCE_KEY = "ailedger_source"  # session override of the source (Data page)
STATE_KEY = "vs_state"  # the session's ViewState (JSON)
WRITTEN_KEY = "vs_written"  # the shared part of the query this session last wrote to the URL
PROBLEMS_KEY = "vs_problems"  # what the last link refused, shown once
PAGE_MEMORY = "vs_page:"  # + page url path: that page's own query, to come back to
# Sidebar widgets (their values are copied into the ViewState by their on_change callbacks).
PERIOD_KEY, DATES_KEY, GRAIN_KEY, COMPARE_KEY = "sb_period", "sb_dates", "sb_grain", "sb_compare"
BOUNDARY_KEY, IDLE_KEY, RECHARGE_KEY = "sb_boundary", "sb_idle", "sb_recharge"
FILTER_KEYS = {"pools": "sb_pools", "accelerators": "sb_accelerators", "workloads": "sb_workloads",
               "tenants": "sb_tenants"}
FILTER_LABELS = {"pools": "Pool", "accelerators": "Accelerator", "workloads": "Workload", "tenants": "Tenant"}


# ------------------------------------------------------------------------------------- source


def source_path() -> str:
    """The store or bundle the dashboard shows: the Data page's choice, AILEDGER_SOURCE, or the sample."""
    chosen = st.session_state.get(SOURCE_KEY)
    return chosen or os.environ.get("AILEDGER_SOURCE", DEFAULT_SOURCE)


def source_is_store(path: str) -> bool:
    p = Path(path)
    return p.is_file() and _is_store_at(str(p), _file_stamp(p))


def _file_stamp(p: Path) -> tuple:
    """Size and mtime of a store file and of its write-ahead log: a committed ingest changes
    one of them, so the caches below open the store (~0.1 s of CPU each time) only then."""
    out: list = []
    for f in (p, p.with_name(p.name + ".wal")):
        try:
            s = f.stat()
            out += [s.st_size, s.st_mtime_ns]
        except OSError:
            out += [None, None]
    return tuple(out)


@st.cache_data(show_spinner=False, max_entries=64)
def _is_store_at(path: str, stamp: tuple) -> bool:
    return views.source_is_store(path)


@st.cache_data(show_spinner=False, max_entries=64)
def _store_version_at(path: str, stamp: tuple, _wait_s: float | None = None) -> str:
    """store.data_version of the store as it is at `stamp` (StoreBusy, not cached, while an
    ingest holds it)."""
    from cost_engine import store

    return store.data_version(path, wait_s=_wait_s)


def data_version(path: str) -> str:
    """A token that changes when the source's data or its config file change."""
    from cost_engine import store

    p = Path(path)
    if source_is_store(path):
        # While an ingest holds the store, keep serving the last version seen (its computation
        # is cached): readers never see half a batch, and the page does not hang on the lock.
        last_key = f"_ailedger_last_version:{p.resolve()}"
        try:
            version = plain_data_version(path, wait_s=None if last_key not in st.session_state else 0.5)
            st.session_state[last_key] = version
        except store.StoreBusy:
            if last_key not in st.session_state:
                raise
            version = st.session_state[last_key]
        return version
    return plain_data_version(path)


def plain_data_version(path: str, wait_s: float | None = None) -> str:
    """data_version without a session (the warm-up at start); raises store.StoreBusy."""
    from cost_engine import store

    p = Path(path)
    parts: list[str] = []
    if source_is_store(path):
        parts.append("store:" + _store_version_at(str(p), _file_stamp(p), _wait_s=wait_s))
    elif p.is_dir():
        for f in sorted(p.iterdir()):
            # Dotfiles (saved views, editor litter) are not data: the bundle reader skips them too.
            if f.is_file() and not f.name.startswith("."):
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


def _load_key(cfg: Config) -> str:
    """The parts of a config that reading the source depends on (bundle.py, overlaps.py): a
    rule or period change computes again from the same read."""
    return json.dumps({"period": {"source_timezone": cfg.period.source_timezone, "currency": cfg.period.currency},
                       "currency_rates": cfg.currency_rates, "validation": cfg.validation.model_dump()},
                      sort_keys=True)


@st.cache_resource(show_spinner=False, max_entries=4)
def _loaded(path: str, version: str, load_key: str) -> tuple:
    """The source read once per data version: (bundle, telemetry source)."""
    data = json.loads(load_key)
    cfg = Config.model_validate({"period": data["period"], "currency_rates": data["currency_rates"],
                                 "validation": data["validation"]})
    return api.load_source(path, cfg)


class _Memo(OrderedDict):
    """engine.compute's memo, bounded: the stages of the last few periods and rules (a ledger with
    its telemetry stage, or a period's resolved requests)."""

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        while len(self) > 8:
            with contextlib.suppress(KeyError):  # another session's thread trimmed it first
                self.popitem(last=False)


@st.cache_resource(show_spinner=False, max_entries=4)
def _memo(path: str, version: str, load_key: str) -> _Memo:
    """What a rule change reuses for one read of the source (engine.compute's memo): the
    ledger, telemetry stage and resolved requests of a period, so changing the boundary,
    drivers, idle treatment, recharge or filters computes only the money again."""
    return _Memo()


@st.cache_resource(show_spinner="Computing the ledger…", max_entries=8)
def _full_computation(path: str, version: str, config_json: str) -> Computation:
    cfg = Config.model_validate_json(config_json)
    load_key = _load_key(cfg)
    bundle, telemetry = _loaded(path, version, load_key)
    return compute(bundle, cfg, telemetry=telemetry, memo=_memo(path, version, load_key))


@st.cache_resource(show_spinner=False, max_entries=24)
def _computation(path: str, version: str, config_json: str) -> Computation:
    """The computation as the signed-in user may see it.

    `version` is `view_version()`: the data version plus the user's scope, so every cache keyed
    by it (views, report, exports) is per scope too and no user ever gets another's rows.
    """
    data_v, _, scope_key = version.partition("|")
    return access.scope(_full_computation(path, data_v, config_json), _principal_from_key(scope_key))


@st.cache_data(show_spinner=False, max_entries=16)
def _span(path: str, version: str, config_json: str) -> period_choice.DataSpan:
    """The source's period (the data the presets count in), without computing the ledger."""
    from cost_engine.ledger import resolve_period

    cfg = Config.model_validate_json(config_json)
    bundle, _ = _loaded(path, version, _load_key(cfg))
    p = resolve_period(cfg, bundle["allocations"])
    return period_choice.DataSpan(p.start, p.end, p.timezone)


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


@st.cache_data(show_spinner=False, max_entries=16)
def _filter_options(path: str, version: str, config_json: str) -> dict:
    """The values each sidebar filter offers (views.filter_options), once per computation."""
    return views.filter_options(_computation(path, version, config_json))


def filter_options(ctx: "Ctx") -> dict:
    return _filter_options(ctx.path, ctx.version, ctx.config_json)


@st.cache_data(show_spinner=False, max_entries=8)
def _report(path: str, version: str, config_json: str) -> dict:
    return build_report(_computation(path, version, config_json))


# Modules whose (comp, filters, ...) functions Ctx.view may call by name.
_VIEW_MODULES = (views, period_views, idle_owners)


@st.cache_data(show_spinner=False, max_entries=512)
def _view(path: str, version: str, config_json: str, filters_json: str, name: str, args_json: str) -> Any:
    comp = _computation(path, version, config_json)
    filters = views.Filters.model_validate_json(filters_json)
    call = json.loads(args_json)
    fn = next(getattr(m, name) for m in _VIEW_MODULES if hasattr(m, name))
    return fn(comp, filters, *call["args"], **call["kwargs"])


@st.cache_data(show_spinner=False, max_entries=32)
def _overview_figures(path: str, version: str, config_json: str, filters_json: str, grain: str = "day") -> dict:
    from cost_engine.exporters import review_pack

    comp = _computation(path, version, config_json)
    return review_pack.overview_figures(comp, views.Filters.model_validate_json(filters_json), grain)


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


def warm_up(path: str | None = None, first: bool = True, rest: bool = True) -> None:
    """Compute the default view of the source before the first visitor asks (server start):
    the first page (Overview) then only lays out (`first`). Then (`rest`), in the order people
    open them, what the other pages compute on their default view (Compare's two default
    periods) and the modules pages import on first use. The caches filled are the pages' own
    (resource caches, and data caches, which Streamlit keeps in memory when no session runs);
    errors are left for the page to show."""
    from cost_engine import compare
    from cost_engine.ledger import resolve_period

    path = path or os.environ.get("AILEDGER_SOURCE", DEFAULT_SOURCE)
    try:
        base = file_config(path)
        version = plain_data_version(path)
        bundle, _ = _loaded(path, version, _load_key(base))
        p = resolve_period(base, bundle["allocations"])
        span = period_choice.DataSpan(p.start, p.end, p.timezone)
        cfg = _period(base, span, period_choice.resolve(period_choice.DEFAULT_PRESET, span))
        scoped = version + "|*"
        if first:
            # What the first page (Overview) waits for: the default view, the source's own period
            # (its budget alerts), the modules a first script run imports, and the Overview's views
            # under the default state (the keys its first run asks for; one that differs only
            # costs the page its own computation, as before).
            import pandas  # noqa: F401 - Streamlit's dataframe and chart elements import it on first use
            import streamlit.emojis  # noqa: F401 - the first caption of a run loads it (~0.3 s)

            from cost_engine.exporters import images, review_pack  # noqa: F401
            from pages import sidebar  # noqa: F401

            images.available()  # imports kaleido, which the chart download buttons ask about
            source_is_store(path)
            _computation(path, scoped, cfg.model_dump_json())
            _computation(path, scoped, base.model_dump_json())
            ctx = Ctx(path=path, version=scoped, config=cfg, filters=views.Filters(), base_config=base,
                      chosen=period_choice.resolve(period_choice.DEFAULT_PRESET, span), span=span)
            _filter_options(path, scoped, cfg.model_dump_json())
            budget_views(ctx)
            ctx.view("kpi_cards")
            ctx.overview_figures()
            ctx.view("trend_buckets", ctx.grain)
            ctx.view("top_tenants", 10)
            ctx.view("reconciliation")
        if not rest:
            return
        # A first visit of Data or Scenario imports these; importing them here keeps that off
        # the visit.
        from cost_engine import importers, scenario  # noqa: F401

        importers.load_entry_points()
        full = _computation(path, scoped, base.model_dump_json())  # (in the first part already)
        for days in compare.default_days(full):
            _computation(path, scoped, compare.period_config(cfg, compare.day_span(full, days)).model_dump_json())
    except Exception:  # noqa: BLE001 - the page reports it to the user
        log.debug("warm-up of %s failed", path, exc_info=True)


# ------------------------------------------------------------------------------------- context


@dataclass(frozen=True)
class Ctx:
    """What a page needs: the source, the view state, the config in force, filters and views."""

    path: str
    version: str
    config: Config
    filters: views.Filters
    base_config: Config
    state: view_state.ViewState = view_state.ViewState()
    chosen: period_choice.Chosen | None = None
    span: period_choice.DataSpan | None = None
    previous: Config | None = None  # the previous period's config, when it lies in the data
    previous_note: str | None = None

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
    def grain(self) -> str:
        return self.state.grain

    @property
    def is_store(self) -> bool:
        return source_is_store(self.path)

    def report(self) -> dict:
        """build_report of the (unfiltered) computation under the effective config."""
        return _report(self.path, self.version, self.config_json)

    def view(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """<module>.<name>(comp, filters, *args, **kwargs) of views or period_views, cached per
        data version, config and filters."""
        return _view(self.path, self.version, self.config_json, self.filters.key(), name,
                     json.dumps({"args": args, "kwargs": kwargs}, default=str, sort_keys=True))

    def previous_view(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The same view over the previous period (None when it is not in the data)."""
        if self.previous is None:
            return None
        return _view(self.path, self.version, self.previous.model_dump_json(), self.filters.key(), name,
                     json.dumps({"args": args, "kwargs": kwargs}, default=str, sort_keys=True))

    def overview_figures(self) -> dict:
        """The Overview's figures (the same the review pack renders), cached."""
        return _overview_figures(self.path, self.version, self.config_json, self.filters.key(), self.grain)

    def raw(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """views.<name>(comp, *args) for views that take no filters (uncached, cheap)."""
        return getattr(views, name)(self.comp, *args, **kwargs)

    def export_context(self) -> exports_meta.ExportContext:
        return exports_meta.context_of(self.comp, self.filters, source=Path(self.path).name,
                                       data_version=audit.version_label(self.version.partition("|")[0]),
                                       grain=self.grain)

    def link(self, page: str = "", **page_params: Any) -> str:
        """A URL path + query to `page` (url path, "" = Overview) in this view, with page keys."""
        from pages.sidebar import app_root

        return f"{app_root()}/{page}?{view_state.encode(link_query(self, **page_params))}"


def set_state(**changes: Any) -> None:
    """Change the session's view state (callbacks: the next run writes it to the URL)."""
    ss = st.session_state
    current = view_state.ViewState.model_validate_json(ss[STATE_KEY]) if ss.get(STATE_KEY) else view_state.ViewState()
    ss[STATE_KEY] = current.model_copy(update=changes).model_dump_json()


def set_rules(**changes: Any) -> None:
    """Change rules of the view (idle, inference_recharge, boundary, ...); None: the source's."""
    ss = st.session_state
    current = view_state.ViewState.model_validate_json(ss[STATE_KEY]) if ss.get(STATE_KEY) else view_state.ViewState()
    set_state(rules=current.rules.model_copy(update=changes))


def set_page_params(**params: Any) -> None:
    """Replace the page's own URL keys (None drops one), keeping the shared view keys: one URL
    update, so the browser's back button returns to the previous drill level."""
    qp = st.query_params
    shared = {k: qp.get_all(k) for k in qp if k in view_state.GLOBAL_KEYS}
    qp.from_dict(view_state.merge(shared, {k: [str(v)] for k, v in params.items() if v not in (None, "")}))


def link_query(ctx: Ctx, **page_params: Any) -> dict[str, list[str]]:
    """The query of a link to another page in this view (st.page_link), with that page's keys."""
    from pages.sidebar import shared_query

    return view_state.merge(shared_query(ctx), {k: [str(v)] for k, v in page_params.items() if v not in (None, "")})


def _period(cfg: Config, span: period_choice.DataSpan, chosen: period_choice.Chosen) -> Config:
    start, end = span.window(chosen.first, chosen.last)
    if (start, end) == (span.start, span.end) and cfg.period.start == span.start and cfg.period.end == span.end:
        return cfg
    return views.config_with(cfg, period_start=start, period_end=end)


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


def sidebar() -> Ctx | None:
    """The shared sidebar (pages/sidebar.py); app.py draws it before each page."""
    from pages import sidebar as bar

    return bar.sidebar()


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


_CTX_KEY = "_vs_ctx_run"  # the Ctx the sidebar resolved in this run (pages reuse it)


def context() -> Ctx:
    """The page context of this run (resolved once by the sidebar; defaults when a page runs
    on its own). A source that cannot be read stops the page with what to do."""
    through_router()
    path = source_path()
    try:
        version = view_version(path)
        cached = _run_ctx()
        if cached is not None:
            return cached
        from pages.sidebar import resolve

        ctx = resolve(path, version)
    except Exception as exc:  # noqa: BLE001 - shown to the user, not swallowed
        _cannot_open(path, exc)
        raise  # _cannot_open stops the run
    return ctx


def _run_id() -> object:
    """A token of this script run: the run's cursor dict, a fresh object per rerun (kept alive
    by the session state entry that holds it, so it is never mistaken for a later one)."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        return get_script_run_ctx().cursors
    except Exception:  # noqa: BLE001
        return None


def _cannot_open(path: str, exc: Exception) -> None:
    log.warning("cannot open %s", path, exc_info=True)
    # The source by its name: the server's folders are no business of the page.
    st.error(f"Cannot open {md(uploads.shown_source(path))}: {md(uploads.without_paths(str(exc), path))}")
    st.info("Open another source on the Data page.")
    if st.session_state.get(SOURCE_KEY):
        if st.button("Back to the default source"):
            st.session_state.pop(SOURCE_KEY, None)
            st.rerun()
    st.stop()


def header(ctx: Ctx, title: str) -> None:
    """Page title and one caption line: period, boundary, rules, filters; then what the link
    or the period could not honour."""
    st.title(title)
    p = ctx.comp.period
    tz = p.timezone
    if ctx.chosen is not None:
        when = f"{period_choice.describe(ctx.chosen.first, ctx.chosen.last)}, {tz}"
        s_local, e_local = p.start.astimezone(ZoneInfo(tz)), p.end.astimezone(ZoneInfo(tz))
        if (s_local.hour, s_local.minute, e_local.hour, e_local.minute) != (0, 0, 0, 0):
            when += f" (data {s_local:%Y-%m-%d %H:%M} – {e_local:%Y-%m-%d %H:%M}: partial days marked)"
    else:
        when = (f"{p.start.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} – {p.end.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} "
                f"({tz})")
    a = ctx.config.allocation
    st.caption(f"{md(when)} · boundary **{ctx.config.boundary.name}** · idle {a.idle} · recharge "
               f"{a.inference_recharge} · {p.currency} · {md(ctx.filters.describe())}")
    filter_note(ctx)
    notes = st.session_state.pop(PROBLEMS_KEY, [])
    if ctx.chosen is not None and ctx.chosen.note:
        notes.append(ctx.chosen.note)
    if notes:
        st.warning("This view could not use everything asked for: " + "; ".join(md(n) for n in notes) + ".",
                   icon=":material/info:")


def filter_note(ctx: Ctx) -> None:
    """Say what the filters leave out whatever values they name (views.left_out): selecting
    every pool still drops the costs that have no pool, and that must not pass unnoticed."""
    if ctx.filters.empty:
        return
    lo = ctx.view("left_out")
    if lo.height:
        cur = ctx.currency
        st.info("Not in these figures: " + "; ".join(
            f"{r['what']}: {fmt(r['amount'], cur)} {md(cur)} not shown" for r in lo.iter_rows(named=True))
            + " (a filter keeps only the values it names).", icon=":material/filter_alt:")


# ---------------------------------------------------------------------------------- formatting


def fmt(value: float | None, unit: str) -> str:
    return views.format_value(value, unit)


CARD_WIDTH = 180  # px: the longest KPI value ("9,767.98", "2,184,391") fits at the metric font


def metric_grid(n: int, key: str) -> Any:
    """A row of n metric cards that wraps to fewer per row when the page is narrow, so no value
    is ever cut ("3…"): put each card with `.metric(...)`."""
    return st.grid(n, min_column_width=CARD_WIDTH, key=key)


def lazy_expander(label: str, key: str, *, expanded: bool = False) -> Any:
    """An expander whose content is built only while it is open (`if box.open:` around it): in
    the browser most of a page visit is React drawing elements, and a collapsed expander's
    elements are drawn all the same unless they are left out (benchmarks/DASHBOARD.md)."""
    return st.expander(label, expanded=expanded, key=key, on_change="rerun")


def kpi_row(ctx: Ctx, keys: list[str], cards: pl.DataFrame | None = None, per_row: int | None = None) -> None:
    """KPI cards from views.kpi_cards (unit in the label, exact value in the help) in a grid that
    wraps on narrow screens (no value is ever cut), with the change against the previous period."""
    cards = cards if cards is not None else ctx.view("kpi_cards")
    by_key = {r["key"]: r for r in cards.iter_rows(named=True)}
    deltas: dict[str, dict] = {}
    prev = ctx.previous_view("kpi_cards")
    if prev is not None:
        deltas = {r["key"]: r for r in period_views.kpi_deltas(cards, prev).iter_rows(named=True)}
    grid = metric_grid(per_row or len(keys), f"kpis_{keys[0]}")
    for key in keys:
        r = by_key[key]
        label = r["label"]  # views.kpi_cards labels carry their unit
        exact = "" if r["value"] is None or r["unit"] == "ratio" else f" Exact: {r['value']:,.6g}."
        d = deltas.get(key) or {}
        prev_text = "" if d.get("previous") is None else f" Previous period: {fmt(d['previous'], r['unit'])}."
        grid.metric(md(label), fmt(r["value"], r["unit"]), delta=d.get("text"), delta_color=d.get("color", "off"),
                    help=md(r["detail"]) + exact + prev_text, border=True,
                    delta_description="vs previous period" if d.get("text") else None)


# ----------------------------------------------------------------------------------- downloads


def chart(fig: go.Figure, key: str, *, name: str | None = None, height: int | None = None,
          ctx: Ctx | None = None, about: list[tuple[str, str]] | None = None) -> None:
    """A Plotly chart with PNG, SVG and HTML downloads. The exports carry the chart's title and
    a subtitle naming the view (period, boundary, idle, recharge, filters, source, data
    version), and a file name with the period and boundary; `about` replaces the view for
    charts that are not a ledger view (a scenario). Images render only when clicked."""
    if height:
        fig.update_layout(height=height)
    st.plotly_chart(fig, key=f"chart_{key}", config={"displaylogo": False})
    base = name or key
    ctx = ctx or (None if about is not None else _run_ctx())
    # The titled copy for the exports is made on a click only: copying a figure costs more than
    # drawing it (a deep copy through plotly's validators), and most views download nothing.
    sub: str | exports_meta.ExportContext | None
    if about is not None:
        sub = " · ".join(f"{k} {v}" for k, v in about)
        stem = exporters.safe_name("_".join([base, *(v for _, v in about[:1])]))
    elif ctx is not None:
        sub = ctx.export_context()
        stem = exports_meta.file_stem(base, sub)
    else:
        sub, stem = None, exporters.safe_name(base)

    def out() -> go.Figure:
        return fig if sub is None else exports_meta.titled(fig, None, sub)

    title = fig.layout.title.text or base
    missing = exporters.unavailable_reason()
    ok = missing is None
    why = None if ok else f"PNG/SVG cannot be made here: {missing}. The HTML download works without it."
    with st.container(horizontal=True, key=f"dl_{key}", gap="small"):
        st.download_button("PNG", data=lambda: exporters.to_png(out()), file_name=f"{stem}.png", mime="image/png",
                           key=f"png_{key}", on_click="ignore", disabled=not ok, help=why, icon=":material/image:")
        st.download_button("SVG", data=lambda: exporters.to_svg(out()), file_name=f"{stem}.svg",
                           mime="image/svg+xml", key=f"svg_{key}", on_click="ignore", disabled=not ok, help=why,
                           icon=":material/draw:")
        st.download_button("HTML", data=lambda: exporters.to_html(out(), title=title),
                           file_name=f"{stem}.html", mime="text/html", key=f"html_{key}", on_click="ignore",
                           icon=":material/code:")


def _run_ctx() -> Ctx | None:
    """The Ctx the sidebar resolved in this run, if it did."""
    cached = st.session_state.get(_CTX_KEY)
    run = _run_id()
    return cached[1] if cached is not None and run is not None and cached[0] is run else None


def table(frame: pl.DataFrame, key: str, *, name: str | None = None, column_config: dict | None = None,
          height: int | str = "auto", title: str | None = None, ctx: Ctx | None = None,
          about: list[tuple[str, str]] | None = None, **kwargs: Any) -> Any:
    """st.dataframe with readable headers and its downloads: CSV for people (a `#` comment
    block naming the view, or `about`, headers with units, shares in %), CSV for machines
    (engine names, no comments) and Parquet (engine names, the view in its metadata).
    Returns the dataframe's state."""
    if not isinstance(frame, pl.DataFrame):  # rows (a list of dicts) from the engine's typed records
        frame = pl.DataFrame(frame)
    ctx = ctx or (None if about is not None else _run_ctx())
    shown = labels.readable_values(frame)
    config = {**_auto_config(shown, ctx), **(column_config or {})}
    state = st.dataframe(shown, key=f"table_{key}", hide_index=True, column_config=config, height=height, **kwargs)
    base = name or key
    heading = title or labels.humanize(base.replace("-", "_"))
    what: exports_meta.ExportContext | list[tuple[str, str]]
    if ctx is not None:
        what = ctx.export_context()
        stem = exports_meta.file_stem(base, what)
    else:
        what = about or []
        stem = exporters.safe_name("_".join([base, *(v for _, v in what[:1])]))
    with st.container(horizontal=True, key=f"dlt_{key}", gap="small"):
        st.download_button("CSV", data=lambda f=frame: exports_meta.csv_for_people(f, what, heading),
                           file_name=f"{stem}.csv", mime="text/csv", key=f"csv_{key}", on_click="ignore",
                           icon=":material/table:",
                           help="For people: what the table shows in `#` lines on top, headers with units, shares "
                                "in %.")
        st.download_button("CSV (raw)", data=lambda f=frame: exports_meta.csv_for_machines(f),
                           file_name=f"{stem}.raw.csv", mime="text/csv", key=f"csvraw_{key}", on_click="ignore",
                           icon=":material/data_object:",
                           help="For programs: the engine's column names, shares as fractions, no comment lines.")
        st.download_button("Parquet", data=lambda f=frame: exports_meta.parquet_with_context(f, what, heading),
                           file_name=f"{stem}.parquet", mime="application/vnd.apache.parquet", key=f"pq_{key}",
                           on_click="ignore", icon=":material/database:")
    return state


def _auto_config(frame: pl.DataFrame, ctx: Ctx | None = None) -> dict:
    """Readable headers with units and number formats by column (money 2 decimals, hours 1,
    shares as %). Only the display changes: the raw downloads keep the engine's names."""
    cur = ctx.currency if ctx is not None else "USD"
    cfg: dict[str, Any] = {}
    for name, dtype in frame.schema.items():
        label = labels.column(name, cur)
        unit = labels.unit_of(name)
        if name == "action":
            cfg[name] = st.column_config.TextColumn(label, width="large")
            continue
        if dtype == pl.Date:
            cfg[name] = st.column_config.DateColumn(label, format="YYYY-MM-DD ddd")
            continue
        if isinstance(dtype, pl.Datetime):
            cfg[name] = st.column_config.DatetimeColumn(label, format="YYYY-MM-DD HH:mm:ss")
            continue
        if not dtype.is_numeric():
            cfg[name] = st.column_config.Column(label)
            continue
        if unit == "ratio":
            cfg[name] = st.column_config.NumberColumn(label, format="percent")
        elif unit in ("money_per_gpu_h", "money_per_1m") or name == "vs_target":
            cfg[name] = st.column_config.NumberColumn(label, format="%.3f")
        elif unit == "money":
            cfg[name] = st.column_config.NumberColumn(label, format="%.2f")
        elif unit in ("gpu_h", "kwh", "kw", "kg", "pct"):
            cfg[name] = st.column_config.NumberColumn(label, format="%.1f")
        elif unit == "tokens_per_j":
            cfg[name] = st.column_config.NumberColumn(label, format="%.5f")
        elif unit in ("tokens", "count"):
            cfg[name] = st.column_config.NumberColumn(label, format="localized")
        else:
            cfg[name] = st.column_config.NumberColumn(label)
    return cfg


def money_columns(frame: pl.DataFrame, names: list[str], ctx: Ctx | None = None) -> dict:
    """The table's usual column config with `names` shown as money (2 decimals, sign kept)."""
    ctx = ctx or _run_ctx()
    cfg = _auto_config(frame, ctx)
    cur = ctx.currency if ctx is not None else "USD"
    for n in names:
        if n in frame.columns:
            cfg[n] = st.column_config.NumberColumn(labels.column(n, cur), format="%+.2f")
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


def show_error(exc: BaseException, where: str = "this page") -> None:
    """An error that escaped a page, as a message that says what to do (never a traceback);
    the traceback goes to the server log."""
    log.error("unexpected error on %s", where, exc_info=exc)
    st.error(f"Something went wrong on {md(where)}: {md(exc) or type(exc).__name__}. "
             "Try another period or filter, or reload the page; if it persists, the server log has the details.",
             icon=":material/error:")
