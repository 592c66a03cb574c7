"""The sidebar every page shares (source, saved views, period, buckets, comparison, boundary,
filters, the link to this view) and the URL it keeps in step with the view state.

The URL is the view: `cost_engine.view_state` parses and writes its shared keys. Each run reads
the state from a link that brings a new one (a fresh link, the browser's back button), else
from the session (a page switch drops the query), resolves it against the source (period
presets, rules, filters), and writes the canonical query back in one update, keeping the
page's own keys (drill level, cause, card) or bringing back those of the page's last visit.
Widgets only report changes (on_change callbacks into the state); they are set from the state
before they are drawn.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import streamlit as st

from cost_engine import access, labels, period_choice, saved_views, uploads, view_state, views
from cost_engine.config import BOUNDARY_PRESETS, ConfigError
from pages.common import (BOUNDARY_KEY, COMPARE_KEY, DATES_KEY, FILTER_KEYS, FILTER_LABELS, GRAIN_KEY, PAGE_MEMORY,
                          PERIOD_KEY, PROBLEMS_KEY, SOURCE_KEY, STATE_KEY, WRITTEN_KEY, _CTX_KEY, Ctx, _period,
                          _filter_options, _run_id, _span, current_principal, file_config, is_admin, log, md, source_is_store,
                          filter_options, source_path, set_rules, set_state, view_version)


def _url_query() -> dict[str, list[str]]:
    qp = st.query_params
    return {k: list(qp.get_all(k)) for k in qp}


def _page_path() -> str:
    """The url path of the page this run shows ("" for the default page)."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        pm = get_script_run_ctx().pages_manager
        info = pm.get_pages().get(pm.current_page_script_hash) or {}
        return "" if info.get("is_default") else str(info.get("url_pathname") or "")
    except Exception:  # noqa: BLE001 - outside a server run
        return ""


def app_root() -> str:
    """The app's URL without the page path (for links: copy link, cross-links)."""
    try:
        from streamlit.runtime.context_util import maybe_trim_page_path
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        url = st.context.url
        if url:
            return maybe_trim_page_path(url, get_script_run_ctx().pages_manager).removesuffix("/")
    except Exception:  # noqa: BLE001 - outside a server run (AppTest): relative links
        pass
    return ""


def _state() -> view_state.ViewState:
    """The state this run shows: a link's, when the URL brings a new one (a fresh link, the
    browser's back button), else the session's (a page switch drops the query)."""
    ss = st.session_state
    url = _url_query()
    shared = {k: v for k, v in url.items() if k in view_state.GLOBAL_KEYS}
    if view_state.has_global(url) and shared != ss.get(WRITTEN_KEY):
        state, problems = view_state.parse_query(url)
        if problems:
            ss[PROBLEMS_KEY] = problems
        ss[STATE_KEY] = state.model_dump_json()
        return state
    raw = ss.get(STATE_KEY)
    if raw:
        try:
            return view_state.ViewState.model_validate_json(raw)
        except ValueError:
            ss.pop(STATE_KEY, None)
    return view_state.ViewState()


def shared_query(ctx: Ctx) -> dict[str, list[str]]:
    """The canonical shared part of this view's query."""
    state = ctx.state.model_copy(update={"filters": ctx.filters})
    cfg = ctx.config
    if ctx.span is not None and ctx.chosen is not None:
        # The link names the rules, not the period window (the period keys name that).
        cfg = cfg.model_copy(update={"period": ctx.base_config.period})
    return view_state.to_query(state, cfg, ctx.base_config)


def resolve(path: str, version: str) -> Ctx:
    """The view of this run: state (URL or session), config in force, filters, comparison."""
    ss = st.session_state
    try:
        base = file_config(path)
    except ConfigError as exc:
        st.error(f"The config of {md(uploads.shown_source(path))} is invalid: "
                 f"{md(uploads.without_paths(str(exc), path))}. Fix its ailedger.toml.")
        if ss.get(SOURCE_KEY):  # an opened source: a way back that needs no reload
            st.button("Back to the default source", key="bad_config_back", on_click=lambda: (
                ss.pop(SOURCE_KEY, None), set_state(period="whole_days", first=None, last=None)))
        st.stop()
    data_v = version.partition("|")[0]
    span = _span(path, data_v, base.model_dump_json())
    state = _state()
    state, rules_cfg, problems = view_state.checked(base, state)
    chosen = period_choice.resolve(state.period, span, state.first, state.last)
    if chosen.preset != state.period:
        state = state.model_copy(update={"period": chosen.preset})
    cfg = _period(rules_cfg, span, chosen)
    filters, dropped = view_state.check_filters(state.filters, _filter_options(path, version, cfg.model_dump_json()))
    problems += dropped
    if problems:
        ss[PROBLEMS_KEY] = [*ss.get(PROBLEMS_KEY, []), *problems]
    previous = note = None
    if state.compare:
        p_first, p_last = period_choice.previous(chosen)
        if span.covers(p_first, p_last):
            previous = _period(rules_cfg, span, period_choice.Chosen("custom", p_first, p_last))
        else:
            note = (f"No comparison: the previous period ({period_choice.describe(p_first, p_last)}) is not "
                    f"wholly in the data ({span.first_day} to {span.last_day}).")
    state = state.model_copy(update={"filters": filters})
    ss[STATE_KEY] = state.model_dump_json()
    return Ctx(path=path, version=version, config=cfg, filters=filters, base_config=base, state=state,
               chosen=chosen, span=span, previous=previous, previous_note=note)


def _write_url(ctx: Ctx) -> None:
    """Put the view in the URL (one update, so the browser's back button steps view by view);
    a page's own keys are kept, or brought back from the last visit of that page."""
    ss = st.session_state
    url = _url_query()
    page = _page_path()
    own = view_state.page_part(url)
    if own:
        ss[PAGE_MEMORY + page] = own
    elif ss.get(PAGE_MEMORY + page):
        own = ss[PAGE_MEMORY + page]
    shared = shared_query(ctx)
    want = view_state.merge(shared, own)  # = view_query(ctx) once written
    ss[WRITTEN_KEY] = shared
    if want != url:
        st.query_params.from_dict(want)


# ------------------------------------------------------------------------------------- sidebar


def _sync_widgets(ctx: Ctx) -> None:
    """Show the state in the sidebar widgets (set before they are drawn, never passed as values)."""
    ss = st.session_state
    span, chosen = ctx.span, ctx.chosen
    ss[PERIOD_KEY] = ctx.state.period
    if span is not None and chosen is not None:
        ss[DATES_KEY] = (chosen.first, chosen.last)
    ss[GRAIN_KEY] = ctx.state.grain
    ss[COMPARE_KEY] = ctx.state.compare
    ss[BOUNDARY_KEY] = ctx.config.boundary.name
    for name, key in FILTER_KEYS.items():
        ss[key] = list(getattr(ctx.filters, name))


def _on_preset() -> None:
    preset = st.session_state[PERIOD_KEY]
    set_state(period=preset, **({} if preset == "custom" else {"first": None, "last": None}))


def _on_dates() -> None:
    v = st.session_state.get(DATES_KEY)
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(d, date) for d in v):
        set_state(period="custom", first=min(v), last=max(v))
    # one date picked so far: wait for the second (the state keeps the old period)


def _on_boundary() -> None:
    b = st.session_state[BOUNDARY_KEY]
    set_rules(boundary=b, categories=None)  # a preset; custom categories come from the Rules page


def _on_filters() -> None:
    set_state(filters=views.Filters(**{n: st.session_state.get(k) or [] for n, k in FILTER_KEYS.items()}))


def _clear_filters() -> None:
    set_state(filters=views.Filters())


def sidebar() -> Ctx | None:
    """The sidebar every page shares: source, saved views, period, buckets, comparison,
    boundary, the four filters, and the link to this view."""
    path = source_path()
    try:
        version = view_version(path)
        ctx = resolve(path, version)
    except Exception:  # noqa: BLE001 - the page shows the error (context())
        log.debug("sidebar: cannot open %s", path, exc_info=True)
        with st.sidebar:
            st.caption(f"Source: `{md(Path(path).name)}` (cannot be read)")
        return None
    st.session_state[_CTX_KEY] = (_run_id(), ctx)
    _write_url(ctx)
    _sync_widgets(ctx)
    comp = ctx.comp
    options = filter_options(ctx)
    span = ctx.span
    with st.sidebar:
        kind = "DuckDB store" if source_is_store(path) else "bundle folder"
        st.caption(f"Source: **{md(Path(path).name)}** ({kind})")
        _saved_views_box(ctx)
        st.selectbox("Period", list(period_choice.PRESETS), key=PERIOD_KEY, on_change=_on_preset,
                     format_func=period_choice.PRESETS.get,
                     help=f"Whole local days in {comp.period.timezone}, counted back from the last whole day of "
                          "the data. Edit the dates for a custom period.")
        if span is not None:
            # value: a pair makes it a range picker (the session's state, set above, is what shows)
            st.date_input("Days", value=st.session_state[DATES_KEY], min_value=span.first_day,
                          max_value=span.last_day, key=DATES_KEY,
                          on_change=_on_dates, label_visibility="collapsed", format="YYYY-MM-DD")
        st.segmented_control("Buckets", list(period_choice.GRAINS), key=GRAIN_KEY, required=True,
                             on_change=lambda: set_state(grain=st.session_state[GRAIN_KEY] or "day"),
                             format_func=lambda g: g.capitalize())
        st.toggle("Compare with the previous period", key=COMPARE_KEY,
                  on_change=lambda: set_state(compare=bool(st.session_state[COMPARE_KEY])))
        presets = list(BOUNDARY_PRESETS)
        if ctx.config.boundary.name not in presets:
            presets.append(ctx.config.boundary.name)
        st.selectbox("Cost boundary", presets, key=BOUNDARY_KEY, on_change=_on_boundary,
                     format_func=lambda b: labels.BOUNDARIES.get(b, b),
                     help="Which cost categories count (presets of the data contract; the Rules page sets "
                          "custom ones).")
        a = ctx.config.allocation
        st.caption(f"Idle: **{a.idle}** · recharge: **{a.inference_recharge}** (Rankings and Rules change them)")
        st.markdown("**Filters** (every page)")
        for name, key in FILTER_KEYS.items():
            st.session_state[key] = [v for v in st.session_state.get(key, []) if v in options[name]]
            st.multiselect(FILTER_LABELS[name], options[name], key=key, placeholder="all", on_change=_on_filters)
        if not ctx.filters.empty:
            st.button("Clear filters", on_click=_clear_filters, type="tertiary")
        if not ctx.state.rules.empty and ctx.config != _period(ctx.base_config, ctx.span, ctx.chosen):
            st.caption("Rules other than the source's are in force (they are in the link).")
            st.button("Back to the source's rules", on_click=lambda: set_state(rules=view_state.Rules()),
                      type="tertiary", key="rules_reset")
        _link_box(ctx)
    return ctx


def view_query(ctx: Ctx) -> dict[str, list[str]]:
    """The one encoding of this view: the shared keys (canonical) and the page's own keys as the
    address bar holds them now. The address bar, "Copy link" and saved views all take it."""
    return view_state.merge(shared_query(ctx), view_state.page_part(_url_query()))


_LINK_SLOT = "_vs_link_slot"  # (run id, the sidebar placeholder of "Copy link") of this run


def _link_box(ctx: Ctx) -> None:
    """Reserve the place of "Copy link" and draw it; `finish_link` draws it again at the end of
    the run, after the page has set its own keys (a drill level, a ranking)."""
    slot = st.empty()
    st.session_state[_LINK_SLOT] = (_run_id(), slot)
    _draw_link(ctx, slot)


def _draw_link(ctx: Ctx, slot) -> None:
    """The link to this view, in a code block (its copy button puts it on the clipboard)."""
    link = f"{app_root()}/{_page_path()}?{view_state.encode(view_query(ctx))}"
    with slot.container():
        with st.popover("Copy link", icon=":material/link:", width="stretch"):
            st.caption("This view (period, rules, filters, page) as a link: copy it with the button at its right.")
            st.code(link, language=None, wrap_lines=True)


def finish_link() -> None:
    """After the page: the link box of this run shows the address bar's final view (app.py)."""
    held = st.session_state.get(_LINK_SLOT)
    cached = st.session_state.get(_CTX_KEY)
    if not held or not cached or held[0] is not _run_id() or cached[0] is not _run_id():
        return
    _draw_link(cached[1], held[1])


def _saved_views_box(ctx: Ctx) -> None:
    """Named views beside the source: open one; administrators save the current one."""
    try:
        # A scoped user is not shown views naming other tenants or their projects.
        saved = saved_views.visible_to(saved_views.load(ctx.path), current_principal(), views.projects(ctx.comp))
    except saved_views.SavedViewError as exc:
        st.warning(f"Saved views: {exc}")
        saved = []
    if saved:
        with st.popover("Saved views", icon=":material/bookmarks:", width="stretch"):
            for v in saved:
                st.page_link(_page_file(v.page), label=v.name, query_params=v.query, icon=":material/bookmark:")
    admin = is_admin()
    with st.popover("Save this view", icon=":material/bookmark_add:", width="stretch", disabled=not admin,
                    help=None if admin else "Saved views are shared with everyone: only administrators save them; "
                                            "copy the link instead."):
        with st.form("save_view", border=False):
            name = st.text_input("Name", max_chars=saved_views.MAX_NAME, key="save_view_name")
            if st.form_submit_button("Save", type="primary"):
                query = view_query(ctx)
                try:
                    saved_views.save(ctx.path, name, _page_path(), query, current_principal())
                except (saved_views.SavedViewError, access.AccessError) as exc:
                    st.error(str(exc))
                else:
                    st.success(f"Saved “{md(name)}” beside the source ({saved_views.views_path(ctx.path).name}).")


_PAGE_FILES = {"": "pages/overview.py"}


def _page_file(url_path: str) -> str:
    return _PAGE_FILES.get(url_path, f"pages/{url_path}.py")
