"""Getting data into the dashboard safely: uploaded files or zips, a folder to open, and the
alias table written back.

- Uploads are capped (`AILEDGER_MAX_UPLOAD_MB`, default 200 MB in all), only bundle file
  types are accepted, and each upload lands in a fresh folder under the upload root.
- A zip member whose path escapes the target folder (absolute, `..`, a drive, a symlink),
  a name too long for a file system (a part over 255 bytes, a path over 1024), too many
  members, or more unpacked bytes than the cap rejects the whole zip; so do two members (or
  an uploaded file and a member) that would land on one file or hold one table in one folder:
  nothing is overwritten silently, and the message names both.
- Every staged bundle is validated with `read_bundle` before it is opened.
- Aliases are saved as the contract says: a store gets an ingest of a bundle holding only the
  new or changed aliases (replace=True); a folder gets its aliases file rewritten.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
import zipfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path, PurePosixPath, PureWindowsPath

import polars as pl

from . import csv_guard
from .access import Principal, require_admin
from .bundle import Bundle, BundleError, read_bundle, validate_frame
from .bundle_formats import table_of
from .config import Config, ConfigError, load_config

ALLOWED_SUFFIXES = (".csv", ".parquet", ".jsonl", ".toml", ".json")
MAX_ZIP_MEMBERS = 500
MAX_NAME_BYTES = 255  # one file or folder name: NAME_MAX of Linux, macOS and Windows file systems
MAX_PATH_BYTES = 1024  # a member's whole path, well inside PATH_MAX with the upload folder before it
DEFAULT_MAX_MB = 200


class UploadError(ValueError):
    """An upload or folder that cannot be used; the message says why."""


def max_upload_bytes() -> int:
    try:
        mb = float(os.environ.get("AILEDGER_MAX_UPLOAD_MB", DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(mb * 1024 * 1024)


def upload_root() -> Path:
    """Where uploads are unpacked: AILEDGER_UPLOAD_DIR, else data/uploads under the working dir."""
    return Path(os.environ.get("AILEDGER_UPLOAD_DIR", "data/uploads"))


def _member_parts(name: str) -> tuple[str, ...]:
    """The path parts of a zip member; raises UploadError for anything that could escape."""
    if not name or "\x00" in name:
        raise UploadError(f"zip member {name!r} has an invalid name")
    if name.startswith(("/", "\\")) or PureWindowsPath(name).drive or PureWindowsPath(name).is_absolute():
        raise UploadError(f"zip member {name!r} has an absolute path")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if any(p == ".." for p in parts):
        raise UploadError(f"zip member {name!r} escapes the target folder")
    # Checked before anything is written: the OS would refuse the name half way through.
    if len(name.encode("utf-8")) > MAX_PATH_BYTES:
        raise UploadError(f"zip member {_shown(name)} has a path of {len(name.encode('utf-8')):,} bytes; "
                          f"at most {MAX_PATH_BYTES:,} are accepted")
    for p in parts:
        if len(p.encode("utf-8")) > MAX_NAME_BYTES:
            raise UploadError(f"zip member {_shown(name)} has a name of {len(p.encode('utf-8')):,} bytes "
                              f"({_shown(p)}); at most {MAX_NAME_BYTES} are accepted")
    return tuple(p for p in parts if p not in ("", "."))


def _shown(name: str, keep: int = 60) -> str:
    """A name for a message: quoted, cut to its first characters when long."""
    return repr(name) if len(name) <= keep else repr(name[:keep]) + f"... ({len(name):,} characters)"


def _claim(claims: dict[tuple[str, ...], str], parts: tuple[str, ...], what: str) -> None:
    """Record that `what` (a member or an uploaded file) lands at `parts`; UploadError naming
    both when another already lands on the same file (case folded: a Mac or Windows disk
    would overwrite) or holds the same table in the same folder (allocations.csv and
    allocations.jsonl)."""
    folder = tuple(p.casefold() for p in parts[:-1])
    table = table_of(parts[-1])
    for key in ((*folder, "file", parts[-1].casefold()), *([(*folder, "table", table)] if table else [])):
        other = claims.get(key)
        if other is not None:
            where = f"the same file {'/'.join(parts)!r}" if key[-2] == "file" else f"table {table}"
            raise UploadError(f"{other} and {what} both hold {where}; upload one of them")
        claims[key] = what


def safe_extract(data: bytes, target: Path, *, max_bytes: int | None = None,
                 max_members: int = MAX_ZIP_MEMBERS, claims: dict[tuple[str, ...], str] | None = None,
                 label: str = "zip") -> list[Path]:
    """Unpack a zip into `target`, refusing the whole archive if any member is unsafe.

    Unsafe: a path that escapes `target` (absolute, drive, `..`, or resolving outside), a
    symlink or special file, more than `max_members` members, or more than `max_bytes`
    unpacked bytes (counted while reading, so a lying header does not help a zip bomb); a
    name too long for a file system; two members landing on one file or one table (`claims`:
    what the upload already placed, shared by stage_upload across its files).
    """
    claims = {} if claims is None else claims
    limit = max_upload_bytes() if max_bytes is None else max_bytes
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    try:
        zf = zipfile.ZipFile(BytesIO(data))
    except zipfile.BadZipFile:
        # Python's own words ("File is not a zip file") say nothing of what to do.
        raise UploadError(f"{_shown(label)} is not a zip archive (it cannot be unpacked); upload the bundle's "
                          "files, or one .zip holding them") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > max_members:
            raise UploadError(f"zip has {len(infos)} members; at most {max_members} are accepted")
        plan: list[tuple[zipfile.ZipInfo, Path]] = []
        for info in infos:
            parts = _member_parts(info.filename)
            # Unix mode in the high bits; no file-type bits (Windows tools, Python's writestr) = a file.
            ftype = stat.S_IFMT(info.external_attr >> 16)
            if ftype not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise UploadError(f"zip member {info.filename!r} is a link or special file")
            if not parts:
                continue
            dest = root.joinpath(*parts).resolve()
            if dest != root and root not in dest.parents:
                raise UploadError(f"zip member {info.filename!r} escapes the target folder")
            if info.is_dir():
                continue
            if parts[0] == "__MACOSX" or parts[-1].startswith("._"):
                continue
            _claim(claims, parts, f"{label} member {_shown(info.filename)}")
            plan.append((info, dest))
        declared = sum(i.file_size for i, _ in plan)
        if declared > limit:
            raise UploadError(f"zip unpacks to {declared:,} bytes; the limit is {limit:,}")
        written: list[Path] = []
        total = 0
        for info, dest in plan:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(dest, "wb") as out:
                while chunk := src.read(1 << 20):
                    total += len(chunk)
                    if total > limit:
                        raise UploadError(f"zip unpacks to more than {limit:,} bytes")
                    out.write(chunk)
            written.append(dest)
    return written


def _bundle_root(folder: Path) -> Path:
    """The folder holding allocations.*: the folder itself or its single sub-folder that does."""
    def has_alloc(p: Path) -> bool:
        return any((p / f"allocations{s}").is_file() for s in (".csv", ".parquet", ".jsonl"))

    if has_alloc(folder):
        return folder
    found = [p for p in folder.rglob("*") if p.is_dir() and has_alloc(p)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise UploadError("no allocations file (allocations.csv, .parquet or .jsonl) in the upload")
    raise UploadError("the upload holds several bundles; upload one at a time")


@dataclass(frozen=True)
class Staged:
    """An upload unpacked and validated."""

    root: Path  # the bundle folder to open
    bundle: Bundle  # read_bundle's result (valid rows, rejections, notes)
    files: tuple[str, ...]  # what was written, relative to the upload folder


def stage_upload(files: list[tuple[str, bytes]], *, root: Path | None = None, config: Config | None = None,
                 max_bytes: int | None = None) -> Staged:
    """Write uploaded files (plain bundle files and/or zips) to a new folder and validate them."""
    limit = max_upload_bytes() if max_bytes is None else max_bytes
    if not files:
        raise UploadError("nothing uploaded")
    size = sum(len(b) for _, b in files)
    if size > limit:
        raise UploadError(f"the upload is {size:,} bytes; the limit is {limit:,}")
    dest = (root or upload_root()) / uuid.uuid4().hex[:12]
    dest.mkdir(parents=True, exist_ok=False)
    # Absolute from here on: safe_extract returns resolved paths, and the default upload root
    # is relative (data/uploads), so relative_to below needs both sides resolved alike.
    dest = dest.resolve()
    try:
        written: list[Path] = []
        claims: dict[tuple[str, ...], str] = {}
        for name, data in files:
            base = name
            if not base or "/" in base or "\\" in base or "\x00" in base or base in (".", "..") or base.startswith("."):
                raise UploadError(f"invalid file name {name!r} (a plain file name is expected)")
            if len(base.encode("utf-8")) > MAX_NAME_BYTES:
                raise UploadError(f"file name {_shown(base)} is longer than {MAX_NAME_BYTES} bytes")
            if base.lower().endswith(".zip"):
                written += safe_extract(data, dest, max_bytes=limit, claims=claims, label=base)
                continue
            if not base.lower().endswith(ALLOWED_SUFFIXES):
                raise UploadError(f"{base}: only {', '.join(ALLOWED_SUFFIXES)} or .zip files are accepted")
            _claim(claims, (base,), f"uploaded file {base!r}")
            (dest / base).write_bytes(data)
            written.append(dest / base)
        bundle_dir = _bundle_root(dest)
        try:
            # The bundle's own config, read as the dashboard will read it once the upload is open:
            # a broken one is refused here, before the source switches (it would stop every page).
            cfg = config if config is not None else load_config(bundle_dir / "ailedger.toml"
                                                                if (bundle_dir / "ailedger.toml").is_file() else None)
            bundle = read_bundle(bundle_dir, cfg)
        except (BundleError, ConfigError) as exc:
            raise UploadError(_inside(str(exc), dest)) from None
        if bundle["allocations"].height == 0:
            rejected = bundle.rejected.filter(pl.col("table") == "allocations").height
            raise UploadError(f"{_alloc_name(bundle_dir)} holds no allocation"
                              + (f" ({rejected:,} rows rejected)" if rejected else "")
                              + ": a bundle needs at least one (the period and every figure start from them)")
        return Staged(root=bundle_dir, bundle=bundle, files=tuple(str(p.relative_to(dest)) for p in written))
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _inside(text: str, folder: Path) -> str:
    """A message with the upload folder's server path taken out (names inside the upload stay)."""
    for prefix in (f"{folder}/", str(folder)):
        text = text.replace(prefix, "")
    return text


def _alloc_name(folder: Path) -> str:
    return next((f"allocations{s}" for s in (".csv", ".parquet", ".jsonl") if (folder / f"allocations{s}").is_file()),
                "allocations")


def shown_source(path: str | Path) -> str:
    """How a source is named on a page: its file or folder name (an upload: "upload <name>"),
    never the server path it lies at."""
    p = Path(path)
    try:
        if p.resolve().is_relative_to(upload_root().resolve()):
            return f"upload {p.name}"
    except OSError:
        pass
    return p.name or str(p)


def without_paths(text: str, path: str | Path) -> str:
    """A message about a source with its server path replaced by the source's shown name."""
    p = Path(path)
    for full in {str(p), str(p.resolve()) if p.exists() else str(p)}:
        text = text.replace(f"{full}/", "").replace(full, shown_source(p))
    return text


def check_source(path: str | Path) -> Path:
    """A folder or store the dashboard can open; raises UploadError saying why not."""
    from . import store

    p = Path(path).expanduser()
    if not p.exists():
        raise UploadError(f"{p} does not exist")
    if p.is_file():
        if store.is_store(p):
            return p
        raise UploadError(store.describe_file(p))
    try:
        if not any((p / f"allocations{s}").is_file() for s in (".csv", ".parquet", ".jsonl")):
            raise UploadError(f"{p} has no allocations file (allocations.csv, .parquet or .jsonl)")
    except OSError as exc:
        raise UploadError(f"{p}: {exc}") from None
    return p


# ------------------------------------------------------------------------------------- aliases


def _clean_aliases(frame: pl.DataFrame) -> pl.DataFrame:
    """Validate edited alias rows like a bundle file; rows without a project are dropped."""
    f = frame.select(
        *(pl.col(c).cast(pl.String).str.strip_chars() if c in frame.columns else pl.lit(None, pl.String).alias(c)
          for c in ("source", "key", "project"))
    ).filter(pl.col("project").is_not_null() & (pl.col("project") != ""))
    valid, rejected = validate_frame("aliases", f, None, "aliases (edited)")
    if rejected.height:
        reasons = "; ".join(f"row {r['row']}: {r['reason']}" for r in rejected.head(5).iter_rows(named=True))
        raise UploadError(f"invalid aliases: {reasons}")
    return valid.select("source", "key", "project")


@dataclass(frozen=True)
class AliasSave:
    written: int  # rows written (store: new or changed; folder: the whole table)
    target: str  # the file written or the store ingested into
    removed: int = 0  # rows dropped from a folder's table


def save_aliases(source: str | Path, edited: pl.DataFrame, current: pl.DataFrame | None = None, *,
                 principal: Principal) -> AliasSave:
    """Write the edited alias table back to the source (administrators only: every user's
    figures follow the aliases; AccessError for anyone else, before anything is read).

    Store: ingest a bundle holding only the new or changed aliases with replace=True (a store
    never deletes; a removed row stays stored). Folder: rewrite its aliases file (same format,
    aliases.csv when it had none) atomically.
    """
    from . import store

    require_admin(principal, "save aliases")
    new = _clean_aliases(edited)
    p = Path(source)
    if p.is_file() and store.is_store(p):
        cur = current if current is not None else store.load_bundle(p, tables=["aliases"])["aliases"]
        cur = cur.select("source", "key", "project")
        changed = new.join(cur, on=["source", "key", "project"], how="anti")
        if changed.height:
            from . import close

            # Aliases move money between owners: a closed period they touch gets a late change.
            late = close.LateHook()
            store.ingest(p, Bundle.from_frames({"aliases": changed}), replace=True, source="dashboard: aliases",
                         user=principal.user, before_commit=late)
            close.post_effects(p, late)
        return AliasSave(written=changed.height, target=str(p))
    return _rewrite_table(p, "aliases", new.sort("source", "key"))


def _rewrite_table(folder: Path, table: str, out: pl.DataFrame) -> AliasSave:
    """Replace a bundle folder's file of `table` with `out` atomically (same format; CSV when the
    folder had none)."""
    if not folder.is_dir():
        raise UploadError(f"{folder} is neither a store nor a bundle folder")
    existing = [folder / f"{table}{s}" for s in (".csv", ".parquet", ".jsonl") if (folder / f"{table}{s}").is_file()]
    target = existing[0] if existing else folder / f"{table}.csv"
    before = 0
    if existing:
        try:
            before = _count_rows(target)
        except Exception:  # noqa: BLE001 - only for the message
            before = 0
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:6]}.tmp")
    if target.suffix == ".parquet":
        out.write_parquet(tmp)
    elif target.suffix == ".jsonl":
        out.write_ndjson(tmp)
    else:
        csv_guard.write_csv(out, tmp, datetime_format="%Y-%m-%dT%H:%M:%SZ")
    os.replace(tmp, target)
    return AliasSave(written=out.height, target=str(target), removed=max(0, before - out.height))


# ------------------------------------------------------------------------------------- budgets


def _clean_budgets(frame: pl.DataFrame, config: Config | None) -> pl.DataFrame:
    """Validate edited budget rows like a bundle file (row numbers as shown, from 1); blank rows
    (a new editor row left empty) are skipped. Times without a zone are the editor's UTC."""
    names = [c for c in frame.columns if c in ("budget_id", "tenant", "project", "period_kind", "amount", "currency",
                                               "boundary", "categories", "start", "end")]
    f = frame.select(names).with_columns(
        pl.col(c).dt.replace_time_zone("UTC") for c in names
        if isinstance(frame.schema[c], pl.Datetime) and frame.schema[c].time_zone is None
    )
    f = f.filter(~pl.all_horizontal(pl.col(c).is_null() for c in names))
    valid, rejected = validate_frame("budgets", f, config, "budgets (edited)")
    if rejected.height:
        reasons = "; ".join(f"row {r['row']}: {r['reason']}" for r in rejected.head(5).iter_rows(named=True))
        raise UploadError(f"invalid budgets: {reasons}")
    return valid


def save_budgets(source: str | Path, edited: pl.DataFrame, current: pl.DataFrame | None = None, *,
                 principal: Principal, config: Config | None = None) -> AliasSave:
    """Write the edited budgets table back to the source (administrators only: AccessError for
    anyone else, checked here whatever the page showed, before anything is read).

    Store: ingest the new or changed budgets with replace=True (a store never deletes: a
    budget removed here stays stored; give it an end date to retire it). Folder: rewrite its
    budgets file (budgets.csv when it had none) atomically.
    """
    from . import store
    from .contract import schema

    require_admin(principal, "edit budgets")
    new = _clean_budgets(edited, config)
    new = new.select([pl.col(c) if c in new.columns else pl.lit(None, d).alias(c) for c, d in schema("budgets").items()])
    p = Path(source)
    if p.is_file() and store.is_store(p):
        cur = current if current is not None else store.load_bundle(p, tables=["budgets"])["budgets"]
        # A row stored without a currency is in the period currency, as the edited rows now say.
        base = (config or Config()).period.currency.upper()
        cur = cur.with_columns(pl.col("currency").str.to_uppercase().fill_null(base))
        changed = new.join(cur.select(new.columns), on=new.columns, how="anti", nulls_equal=True)
        if changed.height:
            try:
                store.ingest(p, Bundle.from_frames({"budgets": changed}), replace=True, source="dashboard: budgets",
                             user=principal.user)
            except store.StoreConflict as exc:
                raise UploadError(str(exc)) from None
        return AliasSave(written=changed.height, target=str(p))
    return _rewrite_table(p, "budgets", new.sort("budget_id"))


def _count_rows(path: Path) -> int:
    if path.suffix == ".parquet":
        return pl.read_parquet(path).height
    if path.suffix == ".jsonl":
        return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return max(0, sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()) - 1)


__all__ = ["UploadError", "Staged", "AliasSave", "safe_extract", "stage_upload", "check_source", "save_aliases",
           "save_budgets", "max_upload_bytes", "upload_root"]


@dataclass(frozen=True)
class Imported:
    """An import of uploaded source-system files: the result and where its records went."""

    result: object  # importers.ImportResult
    target: Path  # a new bundle folder, or the store the records were ingested into
    into_store: bool


def import_upload(
    fmt: str,
    files: list[tuple[str, bytes]],
    config: Config | None = None,
    *,
    store_path: str | Path | None = None,
    options=None,
    root: Path | None = None,
    max_bytes: int | None = None,
    principal: Principal,
) -> Imported:
    """Run an importer (Slurm, DCGM, vLLM, LiteLLM, OpenAI, OTel) on uploaded files.

    The records go into the open store (one ingest, conflicts refused) when `store_path` is
    given, else into a new bundle folder under the upload root. Unmapped rows come back with
    the result (file, row, reason) and travel with the records as rejections. Imports are
    shared data: administrators only (AccessError for anyone else, before anything is written).
    """
    from . import store
    from dataclasses import replace

    from .importers import ImportOptions, import_files, store_lookup, write_bundle

    require_admin(principal, "import data")
    limit = max_upload_bytes() if max_bytes is None else max_bytes
    if not files:
        raise UploadError("nothing uploaded")
    if sum(len(b) for _, b in files) > limit:
        raise UploadError(f"the upload is over the limit of {limit:,} bytes")
    seen: dict[str, str] = {}
    for name, _ in files:  # all names checked before the first is written
        if not name or "/" in name or "\\" in name or "\x00" in name or name.startswith("."):
            raise UploadError(f"invalid file name {name!r} (a plain file name is expected)")
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise UploadError(f"file name {_shown(name)} is longer than {MAX_NAME_BYTES} bytes")
        if name.casefold() in seen:  # the second would overwrite the first: its records lost
            raise UploadError(f"uploaded files {seen[name.casefold()]!r} and {name!r} have one name; "
                              "rename one (or upload them one at a time)")
        seen[name.casefold()] = name
    dest = (root or upload_root()) / ("import-" + uuid.uuid4().hex[:12])
    (dest / "files").mkdir(parents=True)
    paths = []
    for name, data in files:
        (dest / "files" / name).write_bytes(data)
        paths.append(dest / "files" / name)
    if store_path is not None:  # stored jobs keep their cards, re-exports continue stored records
        options = replace(options or ImportOptions(), stored=store_lookup(store_path))
    try:
        result = import_files(fmt, paths, config, options=options)
    except (ValueError, BundleError) as exc:
        raise UploadError(str(exc)) from None
    if result.rows() == 0 and result.input_records:  # the CLI's rule: nothing imported is an error
        why = result.main_reason() or "no record of a known kind"
        raise UploadError(f"nothing imported; most common reason: {why}")
    if store_path is not None:
        try:
            from . import audit, close

            # The dashboard principal is the ingest's user; the uploaded files' hashes go in the trail,
            # and a change to a closed period is recorded as late data (docs/close.md).
            late = close.LateHook(no_late=close.refuses_late(store_path, config))
            store.ingest(store_path, result.bundle(), source=f"dashboard: import {fmt}", user=principal.user,
                         files=audit.file_hashes(paths), before_commit=late,
                         supersede=result.supersede)
            close.post_effects(store_path, late)  # the late effects, stored once (reports read them)
        except store.StoreConflict as exc:
            raise UploadError(f"{exc} (nothing was written)") from None
        except close.LateRefused as exc:  # [close] late = "refuse": said, nothing written
            raise UploadError(str(exc)) from None
        return Imported(result=result, target=Path(store_path), into_store=True)
    write_bundle(result, dest / "bundle", config)
    return Imported(result=result, target=dest / "bundle", into_store=False)
