"""Data: open a folder or store, or upload a bundle (files or a zip); the validation report,
telemetry coverage, unmapped owner keys with their cost, and the alias table to fix them."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import streamlit as st

from cost_engine import charts, close, uploads, views
from cost_engine.access import AccessError
from pages import common

ctx = common.context()
common.header(ctx, "Data")
ss = st.session_state
if not common.is_admin():
    # Sources, uploads, rejected rows and the alias table are fleet-wide: administrators only.
    st.info("The Data page is for administrators: it shows and changes fleet-wide data.")
    st.stop()

# ---- source -------------------------------------------------------------------------------
st.subheader("Source")
kind = "DuckDB store" if ctx.is_store else "bundle folder"
st.markdown(f"Open: **{common.md(uploads.shown_source(ctx.path))}** ({kind}, data version "
            f"{ctx.version.partition('|')[0]})")
if ss.get(common.SOURCE_KEY):
    st.button("Back to the default source", key="reset_source", on_click=lambda: (
        ss.pop(common.SOURCE_KEY, None), common.set_state(period="whole_days", first=None, last=None)))

if ctx.is_store:  # month-end close (docs/close.md): what was sent, and what changed after
    closes = close.closes_table(ctx.path)
    if closes.height:
        st.subheader("Closed periods")
        st.caption("A closed period's report stays as sent; late data posts as corrections in the first open "
                   "period (`ailedger close`, `ailedger reopen`).")
        common.table(closes, "closed_periods", name="closed-periods", title="Closed periods and late changes")

if ss.get("upload_note"):  # above the tabs: the rerun that opened the upload shows the first tab
    st.success(ss.pop("upload_note"))
# The last import's result, above the tabs (its rerun may show the first tab).
last = ss.get("import_done")
if last:
    counts = ", ".join(f"{t}: {n:,}" for t, n in last["counts"].items()) or "no records"
    where = "into the store" if last["into_store"] else f"into the new bundle {common.md(last['target'])} (now open)"
    now_v = ctx.version.partition("|")[0]
    st.success(f"Imported {where}: {counts}. Data version {last['before']} → {now_v}.")
    if last["unmapped"].height:
        st.warning(f"{last['unmapped'].height:,} input records were not imported (they are not in the "
                   f"{'store' if last['into_store'] else 'bundle'}, so the validation report below does not "
                   "count them); the reason for each:")
        common.table(last["unmapped"], "import_unmapped", name="import-not-imported",
                     title="Input records not imported")
    st.button("Dismiss", key="import_dismiss", type="tertiary", on_click=lambda: ss.pop("import_done", None))
open_tab, upload_tab, import_tab = st.tabs(["Open a folder or store", "Upload a bundle",
                                            "Import from a source system"])
with open_tab:
    with st.form("open_source"):
        folder = st.text_input("Path to a bundle folder or an ailedger .duckdb store", key="open_path")
        if st.form_submit_button("Open"):
            try:
                p = uploads.check_source(folder)
            except uploads.UploadError as exc:
                st.error(str(exc))
            else:
                ss[common.SOURCE_KEY] = str(p)
                common.set_state(period="whole_days", first=None, last=None)  # the new data's own days
                st.rerun()
with upload_tab:
    limit_mb = uploads.max_upload_bytes() / 1024 / 1024
    st.caption(f"CSV, Parquet or JSONL files named after the contract tables (allocations.csv, ...), an "
               f"ailedger.toml, or one zip holding them; {limit_mb:,.0f} MB at most.")
    files = st.file_uploader("Bundle files or a zip", type=["csv", "parquet", "jsonl", "toml", "json", "zip"],
                             accept_multiple_files=True, key="upload_files", max_upload_size=int(max(1, limit_mb)))
    if files and st.button("Validate and open", type="primary", key="upload_go"):
        try:
            staged = uploads.stage_upload([(f.name, f.getvalue()) for f in files])
        except (uploads.UploadError, OSError) as exc:
            # Only the refusal: the open source's validation below would read as this upload's.
            st.error(f"Upload refused: {common.md(uploads.without_paths(str(exc), uploads.upload_root()))}. "
                     f"The open source is unchanged ({common.md(uploads.shown_source(ctx.path))}).")
            st.stop()
        else:
            ss[common.SOURCE_KEY] = str(staged.root)
            common.set_state(period="whole_days", first=None, last=None)  # the new data's own days
            ss["upload_note"] = (f"Opened the upload ({len(staged.files)} files, "
                                 f"{staged.bundle.rejected.height} rows rejected).")
            st.rerun()
with import_tab:
    from cost_engine.importers import FORMATS

    st.caption("Exports of a scheduler, a metrics stack or a gateway, converted to the contract's tables "
               "(see docs/importers.md). Into the open store when it is one, else into a new bundle folder.")
    fmt = st.selectbox("Format", sorted(FORMATS), key="import_format")
    src_files = st.file_uploader("Files of that format", accept_multiple_files=True, key="import_files",
                                 max_upload_size=int(max(1, uploads.max_upload_bytes() / 1024 / 1024)))
    tz = st.text_input("Time zone of offset-less times (Slurm's sacct writes none)", value="UTC", key="import_tz")
    if src_files and st.button("Import", type="primary", key="import_go"):
        cfg = ctx.base_config.model_copy(update={"period": ctx.base_config.period.model_copy(
            update={"source_timezone": tz or None})})
        try:
            done = uploads.import_upload(fmt, [(f.name, f.getvalue()) for f in src_files], cfg,
                                         store_path=ctx.path if ctx.is_store else None,
                                         principal=common.current_principal())
        except (uploads.UploadError, AccessError) as exc:
            st.error(f"Import refused: {exc}")
        else:
            # Rerun before showing the result: the page then reads the new data version and the
            # stored tables, so the import's message and the validation below agree.
            ss["import_done"] = {"counts": done.result.counts(), "unmapped": done.result.unmapped,
                                 "into_store": done.into_store, "target": str(done.target),
                                 "before": ctx.version.partition("|")[0]}
            if not done.into_store:
                ss[common.SOURCE_KEY] = str(done.target)
                common.set_state(period="whole_days", first=None, last=None)
            st.rerun()

# ---- validation ---------------------------------------------------------------------------
st.subheader("Validation report")
bundle = ctx.comp.bundle
summary = ctx.view("validation_report")  # cached: a store's telemetry count opens the store
p = ctx.comp.period
grid = st.grid(2, min_column_width=420, key="validation_grid")
with grid.cell():
    common.table(summary, "validation", name="validation-summary", height=35 * (summary.height + 1) + 3,
                 title="Validation of the source's tables")
with grid.cell():
    rej = views.rejections(bundle)
    if rej.height == 0:
        st.success("Every row the source holds passed validation (rows an import did not convert are "
                   "listed with the import, above).")
    else:
        st.warning(f"{rej.height:,} rows rejected (first 1,000 shown; the downloads have them all).")
        common.table(rej.head(1000), "rejections", name="rejections", title="Rejected rows")
    outside = summary.filter(pl.col("outside_period").fill_null(0) > 0)
    if outside.height:
        tz = p.timezone
        st.info(
            "Rows outside the period (accepted and kept, counted in no figure of "
            f"{p.start.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} – {p.end.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} "
            f"{tz}): " + ", ".join(f"{r['table']} {r['outside_period']:,}" for r in outside.iter_rows(named=True))
            + ". Choose another period in the sidebar to see them."
        )
gaps = views.gaps(ctx.comp)
if gaps.height:
    st.markdown("**Coverage gaps and notes** (what the engine could not know, and how it handled it)")
    common.table(gaps, "gaps", name="gaps", column_config={"what": st.column_config.TextColumn("what", width="small"),
                                                            "detail": st.column_config.TextColumn("detail",
                                                                                                  width="large")})

# ---- telemetry coverage -------------------------------------------------------------------
st.subheader("Telemetry coverage")
cov = ctx.view("telemetry_coverage")
t = ctx.view("totals")
st.caption(f"{common.fmt(t['telemetry_coverage'], 'ratio')} of allocated GPU-hours have telemetry; time without "
           "it is neither active nor idle.")
grid = st.grid(2, min_column_width=420, key="coverage_grid")
with grid.cell():
    common.chart(charts.coverage(cov), "coverage", name="telemetry-coverage")
with grid.cell():
    common.table(cov, "coverage_table", name="telemetry-coverage")
box = common.lazy_expander("Per card", "coverage_cards_open")
if box.open:
    with box:
        common.table(ctx.view("telemetry_coverage", "card"), "coverage_cards", name="telemetry-coverage-cards")

# ---- unmapped owners and aliases ----------------------------------------------------------
st.subheader("Unmapped owner keys")
un = ctx.raw("unattributed")
if un.height == 0:
    st.success("Every owner key maps to a project.")
else:
    st.caption(f"These keys map to no project; {un['cost'].sum():,.2f} {ctx.currency} sits in the unattributed "
               "bucket (their rows passed validation: a key is not an error). Give them a project in the alias "
               "table below.")
    common.table(un, "unattributed", name="unattributed")

st.subheader("Alias table")
aliases = ctx.raw("alias_table")
known = ctx.raw("projects")
st.caption("Each system's spelling (source, key) of a canonical project. Unmapped keys are listed with an empty "
           "project: pick one and save." + (" A store keeps removed rows (ingest never deletes)." if ctx.is_store
                                            else ""))
edited = st.data_editor(
    aliases,
    key=f"alias_editor_{ctx.version}",
    num_rows="dynamic",
    hide_index=True,
    disabled=["unmapped"],
    column_config={
        "source": st.column_config.TextColumn("source", required=True),
        "key": st.column_config.TextColumn("key", required=True),
        "project": st.column_config.SelectboxColumn("project", options=known),
        "unmapped": st.column_config.CheckboxColumn("unmapped", help="A key that maps nowhere today"),
    },
)
target = "the store (ingest with replace)" if ctx.is_store else f"{Path(ctx.path).name}/aliases file"
if st.button(f"Save aliases to {target}", type="primary", key="save_aliases"):
    frame = edited if isinstance(edited, pl.DataFrame) else pl.from_pandas(edited)
    try:
        result = uploads.save_aliases(ctx.path, frame, current=ctx.comp.bundle["aliases"],
                                      principal=common.current_principal())
    except (uploads.UploadError, ValueError, AccessError) as exc:
        st.error(f"Not saved: {exc}")
    else:
        ss["alias_note"] = f"Saved {result.written} alias rows to {result.target}; the figures are recomputed."
        st.rerun()
if ss.get("alias_note"):
    st.success(ss.pop("alias_note"))
