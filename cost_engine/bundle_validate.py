"""The one validation every bundle format shares: parse each column, check it, convert currencies,
drop duplicates, name each rejected row."""

from __future__ import annotations

import polars as pl

from . import overlaps, unicode_names
from .config import Config
from .contract import RECORD_KEYS, REJECTED_SCHEMA, TABLES, TS, Column, empty, schema
from .table_rules import RAW as _RAW
from .table_rules import Problem as _Problem
from .table_rules import exchange_rates as _rates
from .table_rules import post_parse as _post_parse
from .table_rules import raw as _raw
from .table_rules import rules as _rules
from .table_rules import shown as _shown
from .table_rules import tag_budget_rejections


ROW = "_row"


REJECTIONS_SCHEMA = REJECTED_SCHEMA | {"file": pl.String}


_USUAL = "__usual__"  # prefix of timestamp columns parsed by the fast path


_MAX_ROWS_SHOWN = 10  # row numbers listed in one conflicting-duplicate reason


_ISO_AWARE = "%Y-%m-%dT%H:%M:%S%.f%#z"  # %#z: Z, +hh, +hhmm, +hh:mm


_ISO_NAIVE = "%Y-%m-%dT%H:%M:%S%.f"


_EPOCH_RE = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"


# Epoch seconds beyond this (year ~5138) are almost surely milliseconds or nanoseconds.
_MAX_EPOCH_S = 1e11


# Numbers beyond this (a quadrillion dollars, tokens or watts) are no measurement; accepting
# them would let sums overflow (tokens are int64) or reach inf (two amounts of 1e308), and the
# reconciliation could no longer balance. Such values are rejected as too large.
_MAX_MAGNITUDE = 1e15


class BundleError(ValueError):
    """A bundle that cannot be read at all (missing folder, file or column, unparseable file)."""


def _no_rejections() -> pl.DataFrame:
    return pl.DataFrame(schema=REJECTIONS_SCHEMA)


def validate_frame(
    table: str,
    raw: pl.DataFrame,
    config: Config | None,
    file: str,
    *,
    notes: list[tuple[str, str]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse and check a frame of raw values (strings or typed) for one contract table.

    Returns (valid rows in the canonical schema plus extra columns as strings, rejected
    rows as table/row/reason/file). `ROW` is added (1-based) when the frame lacks it.
    Remarks that are not rejections (dropped identical duplicates, currency conversion)
    are appended to `notes` when given. Raises BundleError when a required column is
    missing from the frame entirely.
    """
    config = config or Config()
    if ROW not in raw.columns:
        raw = raw.with_row_index(ROW, offset=1)
    raw = raw.with_columns(pl.col(ROW).cast(pl.Int64))
    if raw.height == 0 and raw.width == 1:  # no header at all (0-byte file): nothing to check
        return _finish(table, empty(table), [], config, None), _no_rejections()
    _check_columns(table, raw, file)

    names = [c.name for c in TABLES[table]]
    extras = [c for c in raw.columns if c != ROW and c not in names]
    raw, renamed = unicode_names.normalise_columns(raw, _text_columns(table))
    _note_nfc(notes, table, renamed)
    good, bad = _checked(table, raw, config)
    good, conflicts, dropped = _dedupe(table, good, names)
    if dropped and notes is not None:
        notes.append(("duplicate rows", f"{table}: {dropped} identical duplicate rows counted once"))
    good, overlapping, cut = overlaps.check(table, good, config, ROW)
    if notes is not None:
        notes += cut

    rejected = pl.concat([bad, conflicts, overlapping])
    if table == "budgets" and rejected.height:
        rejected = tag_budget_rejections(rejected, raw.select(pl.col(ROW).alias("row"), "budget_id"))
    rejected = rejected.sort("row").select(
        pl.lit(table, pl.String).alias("table"), "row", "reason", pl.lit(file, pl.String).alias("file")
    )
    return _finish(table, good, extras, config, notes), rejected.cast(dict(REJECTIONS_SCHEMA))


def _text_columns(table: str) -> list[str]:
    return [c.name for c in TABLES[table] if c.dtype == pl.String]


def _note_nfc(notes: list[tuple[str, str]] | None, table: str, rows: int) -> None:
    if rows and notes is not None:
        notes.append(("unicode normalized", f"{table}: {rows} rows had names in another Unicode form, read as "
                      "NFC (names that differ only in normalization are one name)"))


# Columns the reader adds to costs: the amount and currency as given, before conversion.
_COST_ORIGINALS = ("original_amount", "original_currency")


def _finish(
    table: str, good: pl.DataFrame, extras: list[str], config: Config, notes: list[tuple[str, str]] | None
) -> pl.DataFrame:
    """Canonical columns in contract order, then the file's extra columns as strings."""
    names = list(schema(table))
    if table != "costs":
        return good.select(*names, *(_named(good, c).cast(pl.String) for c in extras))
    good = _convert_currency(good, config, extras, notes)
    others = [c for c in extras if c not in _COST_ORIGINALS]
    return good.select(*names, *(_named(good, c).cast(pl.String) for c in others), *_COST_ORIGINALS)


def _named(frame: pl.DataFrame, name: str) -> pl.Expr:
    """The column called `name`, taken by position: a file's own column names may be "*" or
    "^...$", which pl.col would read as a wildcard or a regex."""
    return pl.nth(frame.columns.index(name)).alias(name)


def _check_columns(table: str, raw: pl.DataFrame, file: str) -> None:
    missing = [c.name for c in TABLES[table] if c.required and c.name not in raw.columns]
    if missing:
        cols = ", ".join(missing)
        hint = ""
        names = [c for c in raw.columns if c != ROW]
        if len(names) == 1:  # one column: the header was not split at commas
            for sep, label in ((";", "';'"), ("\t", "tab"), ("|", "'|'")):
                if sep in names[0]:
                    hint = f"; the header looks {label}-separated, the contract wants ','"
                    break
        raise BundleError(
            f"{file}: required column{'s' if len(missing) > 1 else ''} {cols} missing ({table}){hint}"
        )


def _checked(table: str, raw: pl.DataFrame, config: Config) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(valid rows with parsed columns, rejected rows as row/reason)."""
    cols = TABLES[table]
    present = {c.name for c in cols if c.name in raw.columns}
    # Parsers take text, numbers and datetimes; anything else (null, bool, categorical) as text.
    raw = raw.with_columns(pl.col(n).cast(pl.String) for n in present if not _parser_input(raw.schema[n]))
    dtypes = {c.name: (raw.schema[c.name] if c.name in present else pl.String) for c in cols}
    lf = raw.lazy().rename({n: _RAW + n for n in present})
    lf = lf.with_columns(pl.lit(None, pl.String).alias(_RAW + c.name) for c in cols if c.name not in present)
    lf = lf.with_columns(_clean(_raw(c.name)).alias(_RAW + c.name) for c in cols if dtypes[c.name] == pl.String)
    # The usual timestamp spelling is parsed once up front; the slower paths only see the rest.
    text_ts = [c.name for c in cols if c.dtype == TS and dtypes[c.name] == pl.String]
    lf = lf.with_columns(_usual_ts(_raw(n)).alias(_USUAL + n) for n in text_ts)

    parsed = {c.name: _parse_column(c, dtypes[c.name], config) for c in cols}
    # Each step runs once over all rows and only cheap flags are computed there: a value
    # that was given but did not parse, or a required value that is missing.
    lf = lf.with_columns(value.alias(name) for name, (value, _) in parsed.items())
    given_but_unparsed = [_raw(c.name).is_not_null() & pl.col(c.name).is_null() for c in cols if c.dtype != pl.String]
    missing = [_raw(c.name).is_null() for c in cols if c.required]
    lf = lf.with_columns(pl.any_horizontal(*given_but_unparsed, *missing).alias("__bad"))
    lf = lf.with_columns(pl.col(c.name).fill_null(pl.lit(c.default, c.dtype)) for c in cols if c.default is not None)
    lf = lf.with_columns(_post_parse(table, config))
    rules = _rules(table, config)
    checked = lf.with_columns(pl.col("__bad") | _any(rules)).collect()

    raw_cols = [_RAW + c.name for c in cols] + [_USUAL + n for n in text_ts]
    good = checked.lazy().filter(~pl.col("__bad")).drop("__bad", *raw_cols).collect()
    # Messages are text work: build them only for the (usually few) rejected rows, where
    # each parser explains exactly what went wrong.
    problems = [p for _, found in parsed.values() for p in found]
    reasons = _join_reasons([*problems, *rules])
    fallback = pl.lit("row could not be read")  # never expected: every flag above has a message
    bad = checked.filter(pl.col("__bad")).select(
        pl.col(ROW).alias("row"), pl.when(reasons != "").then(reasons).otherwise(fallback).alias("reason")
    )
    return good, bad


def _parser_input(dtype: pl.DataType) -> bool:
    return dtype == pl.String or dtype.is_numeric() or isinstance(dtype, (pl.Datetime, pl.Date))


def _any(problems: list[_Problem]) -> pl.Expr:
    if not problems:
        return pl.lit(False)
    return pl.any_horizontal(p.flag.fill_null(False) for p in problems)


def _join_reasons(problems: list[_Problem]) -> pl.Expr:
    """All problems of a row, '; '-joined in column order, then table rules."""
    parts = [pl.when(p.flag).then(p.message) for p in problems]
    return pl.concat_str(parts, separator="; ", ignore_nulls=True)


def _clean(text: pl.Expr) -> pl.Expr:
    """Text stripped of surrounding whitespace; empty text is a missing value."""
    s = text.str.strip_chars()
    return pl.when(s == "").then(None).otherwise(s)


def _parse_column(c: Column, dtype: pl.DataType, config: Config) -> tuple[pl.Expr, list[_Problem]]:
    value = _raw(c.name)
    if c.dtype == pl.String:
        value, problems = value.cast(pl.String), []
    elif c.dtype == pl.Float64:
        value, problems = _parse_float(c.name, value, dtype)
    elif c.dtype == pl.Int64:
        value, problems = _parse_int(c.name, value, dtype)
    else:
        value, problems = _parse_ts(c.name, value, dtype, config.period.source_timezone)
    if c.required:
        problems = [_Problem(_raw(c.name).is_null(), pl.lit(f"missing required {c.name}")), *problems]
    return value, problems


def _numeric_problems(name: str, clean: pl.Expr, number: pl.Expr) -> list[_Problem]:
    shown = _shown(clean)
    return [
        _Problem(clean.is_not_null() & number.is_null(), pl.format(f"{name} is not a number: '{{}}'", shown)),
        _Problem(number.is_nan(), pl.lit(f"{name} is NaN")),
        _Problem(number.is_infinite(), pl.format(f"{name} is infinite: '{{}}'", shown)),
    ]


def _as_float(clean: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    if dtype.is_numeric() or dtype == pl.String:
        return clean.cast(pl.Float64, strict=False)
    return pl.lit(None, pl.Float64)  # a datetime where a number belongs


def _too_large(name: str, clean: pl.Expr, number: pl.Expr) -> _Problem:
    return _Problem(
        number.is_finite() & (number.abs() > _MAX_MAGNITUDE),
        pl.format(f"{name} {{}} is too large (above {_MAX_MAGNITUDE:.0e})", _shown(clean)),
    )


def _parse_float(name: str, clean: pl.Expr, dtype: pl.DataType) -> tuple[pl.Expr, list[_Problem]]:
    number = _as_float(clean, dtype)
    # NaN/inf and absurd magnitudes are rejected here; nulling them keeps range rules from
    # judging them again.
    ok = number.is_finite() & (number.abs() <= _MAX_MAGNITUDE)
    return pl.when(ok).then(number), [*_numeric_problems(name, clean, number), _too_large(name, clean, number)]


def _parse_int(name: str, clean: pl.Expr, dtype: pl.DataType) -> tuple[pl.Expr, list[_Problem]]:
    number = _as_float(clean, dtype)
    # Exact integers first (no float rounding for big counts), then integral floats like "12.0".
    exact = clean.cast(pl.Int64, strict=False) if dtype == pl.String or dtype.is_integer() else None
    integral = number.is_finite() & (number == number.floor()) & (number.abs() < 2.0**63)
    from_float = pl.when(integral).then(number.cast(pl.Int64, strict=False))
    whole = pl.coalesce(exact, from_float) if exact is not None else from_float
    big = number.abs() > _MAX_MAGNITUDE
    value = pl.when(~big & (whole.abs() <= int(_MAX_MAGNITUDE))).then(whole)
    problems = [*_numeric_problems(name, clean, number), _too_large(name, clean, number)]
    problems.append(
        _Problem(
            number.is_finite() & ~big & whole.is_null(),
            pl.format(f"{name} is not an integer: '{{}}'", _shown(clean)),
        )
    )
    return value, problems


def _parse_ts(
    name: str, clean: pl.Expr, dtype: pl.DataType, source_tz: str | None
) -> tuple[pl.Expr, list[_Problem]]:
    if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None:
        return clean.dt.convert_time_zone("UTC").dt.cast_time_unit("us"), []
    if isinstance(dtype, (pl.Datetime, pl.Date)):
        return _localise(name, clean.cast(pl.Datetime("us")), clean, source_tz)
    if dtype.is_numeric():
        return _epoch(name, clean.cast(pl.Float64), clean)
    text = clean.cast(pl.String)
    # Only what the usual spelling did not parse goes through the regex work, which costs
    # more than the parse itself.
    usual = pl.col(_USUAL + name)
    rest = pl.when(usual.is_null()).then(text)
    iso = _normalise_iso(rest)
    aware = iso.str.to_datetime(_ISO_AWARE, time_unit="us", strict=False)
    naive = iso.str.to_datetime(_ISO_NAIVE, time_unit="us", strict=False)
    local, local_problems = _localise(name, naive, text, source_tz)
    epoch_number = pl.when(rest.str.contains(_EPOCH_RE)).then(rest.cast(pl.Float64, strict=False))
    epoch, epoch_problems = _epoch(name, epoch_number, text)
    unparsed = rest.is_not_null() & aware.is_null() & naive.is_null() & epoch_number.is_null()
    problems = [
        _Problem(unparsed, pl.format(f"{name} is not a timestamp: '{{}}'", _shown(text))),
        *local_problems,
        *epoch_problems,
    ]
    value = pl.coalesce(usual, aware, local, epoch).dt.convert_time_zone("UTC")
    return value, problems


def _usual_ts(text: pl.Expr) -> pl.Expr:
    """ISO 8601 as most sources write it: 'T', seconds, any fraction, Z/+hh/+hhmm/+hh:mm."""
    return text.str.to_datetime(_ISO_AWARE, time_unit="us", strict=False)


def _normalise_iso(text: pl.Expr) -> pl.Expr:
    """Bring other ISO 8601 spellings to the usual one: 'T' separator, seconds present."""
    s = text.str.replace(r"^(\d{4}-\d{2}-\d{2})[Tt ]", "${1}T")
    s = s.str.replace(r"^(\d{4}-\d{2}-\d{2})$", "${1}T00:00:00")
    return s.str.replace(r"T(\d{2}:\d{2})([Zz+-]|$)", "T${1}:00${2}")


def _localise(
    name: str, naive: pl.Expr, shown_from: pl.Expr, source_tz: str | None
) -> tuple[pl.Expr, list[_Problem]]:
    """Offset-less times: rejected, or read in `source_timezone` (never guessing DST)."""
    shown = _shown(shown_from)
    if source_tz is None:
        reason = pl.format(
            f"{name} timestamp without offset '{{}}' (add Z or +hh:mm, or set period.source_timezone)", shown
        )
        return pl.lit(None, pl.Datetime("us", "UTC")), [_Problem(naive.is_not_null(), reason)]
    strict = naive.dt.replace_time_zone(source_tz, ambiguous="null", non_existent="null")
    earliest = naive.dt.replace_time_zone(source_tz, ambiguous="earliest", non_existent="null")
    failed = naive.is_not_null() & strict.is_null()
    problems = [
        _Problem(
            failed & earliest.is_not_null(),
            pl.format(f"{name} '{{}}' is ambiguous in {source_tz} (DST change; give an offset)", shown),
        ),
        _Problem(
            failed & earliest.is_null(),
            pl.format(f"{name} '{{}}' does not exist in {source_tz} (DST gap; give an offset)", shown),
        ),
    ]
    return strict.dt.convert_time_zone("UTC"), problems


def _epoch(name: str, seconds: pl.Expr, shown_from: pl.Expr) -> tuple[pl.Expr, list[_Problem]]:
    ok = seconds.is_finite() & (seconds.abs() < _MAX_EPOCH_S)
    micros = pl.when(ok).then((seconds * 1_000_000).round().cast(pl.Int64))
    value = pl.from_epoch(micros, time_unit="us").dt.replace_time_zone("UTC")
    problems = [
        _Problem(
            seconds.is_not_null() & ~ok,
            pl.format(f"{name} '{{}}' is not a timestamp (epoch seconds expected)", _shown(shown_from)),
        )
    ]
    return value, problems


def _convert_currency(
    costs: pl.DataFrame, config: Config, extras: list[str], notes: list[tuple[str, str]] | None
) -> pl.DataFrame:
    """Amounts in another currency become period currency; the originals stay alongside.

    A file that already carries original_amount/original_currency (a re-exported bundle)
    keeps them where they are filled.
    """
    base = config.period.currency.upper()
    given_amount = pl.col("original_amount").cast(pl.Float64, strict=False) if "original_amount" in extras else None
    given_currency = pl.col("original_currency").cast(pl.String) if "original_currency" in extras else None
    costs = costs.with_columns(
        pl.coalesce([e for e in (given_amount, pl.col("amount")) if e is not None]).alias("original_amount"),
        pl.coalesce([e for e in (given_currency, pl.col("currency")) if e is not None]).alias("original_currency"),
    )
    foreign = costs.filter(pl.col("currency") != base)
    if foreign.height and notes is not None:
        codes = ", ".join(sorted(foreign["currency"].unique().to_list()))
        notes.append(("currency converted", f"costs: {foreign.height} rows converted from {codes} to {base}"))
    rate = pl.col("currency").replace_strict(_rates(config), default=None, return_dtype=pl.Float64)
    return costs.with_columns(
        pl.when(pl.col("currency") != base).then(pl.col("amount") * rate).otherwise(pl.col("amount")).alias("amount"),
        pl.lit(base, pl.String).alias("currency"),
    )


def _dedupe(table: str, good: pl.DataFrame, names: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Identical rows count once; rows sharing a record key with different content are all rejected.

    Returns (kept rows, rejections as row/reason, number of identical duplicates dropped).
    Tables without a record key are keyed by their whole content.
    """
    key = list(RECORD_KEYS.get(table, ())) or names
    no_conflicts = pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    # Cheap screen first: only rows whose key hash repeats can be duplicates at all.
    suspect = good.select(pl.struct(key).hash().is_duplicated()).to_series()
    if not suspect.any():
        return good, no_conflicts, 0
    marked = good.filter(suspect).with_columns(
        (pl.struct(names).hash().n_unique().over(key) > 1).alias("__conflict"),
        pl.struct(key).is_first_distinct().alias("__first"),
    )
    clash = marked.filter(pl.col("__conflict"))
    repeats = marked.filter(~pl.col("__conflict") & ~pl.col("__first"))
    removed = pl.concat([clash[ROW], repeats[ROW]])
    kept = good.filter(~pl.col(ROW).is_in(removed.implode()))
    return kept, _conflict_reasons(clash, key), repeats.height


def _conflict_reasons(clash: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    if clash.height == 0:
        return pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    groups = clash.group_by(key, maintain_order=True).agg(pl.col(ROW).sort().alias("__rows"))
    shown_rows = pl.col("__rows").list.head(_MAX_ROWS_SHOWN).cast(pl.List(pl.String)).list.join(", ")
    more = pl.col("__rows").list.len().cast(pl.Int64) - _MAX_ROWS_SHOWN
    rows_text = pl.when(more > 0).then(pl.format("{}, ... {} more", shown_rows, more)).otherwise(shown_rows)
    key_text = pl.concat_str(
        [pl.format(f"{k} {{}}", _key_value(k, clash.schema[k])) for k in key], separator=", "
    )
    groups = groups.with_columns(pl.format("conflicting duplicate {} (rows {})", key_text, rows_text).alias("reason"))
    return (
        clash.select(ROW, *key)
        .join(groups.select(*key, "reason"), on=key, how="left", nulls_equal=True)
        .select(pl.col(ROW).alias("row"), "reason")
    )


def _key_value(name: str, dtype: pl.DataType) -> pl.Expr:
    col = pl.col(name)
    if isinstance(dtype, pl.Datetime):
        col = col.dt.to_string("%Y-%m-%dT%H:%M:%S%.fZ")
    return _shown(col).fill_null("(empty)")
