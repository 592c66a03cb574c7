"""JSON objects that name a key twice: readers disagree on which value counts (polars keeps the
first, Python's json the last), so a JSON line that does is rejected rather than read either way."""

from __future__ import annotations

import json

import polars as pl


def loads(line: str) -> object:
    """json.loads, raising RepeatedKey when an object (at any depth) names a key twice."""
    return json.loads(line, object_pairs_hook=_unique_keys)


def hides_repeated_key(frame: pl.DataFrame, lines: pl.Series, keys: list[str]) -> bool:
    """Whether some line names a key twice (polars keeps the first value, json the last: a
    row must not depend on the reader, so such lines are rejected by the line reader).

    Cheap screen with literal counts (no regex, no parse): every key of a line is followed by
    `":`; a line whose count of those exceeds its values read (non-null, plus explicit nulls)
    may repeat a key. Text inside a string that looks like `":` or `": null` counts on both
    sides, so a repeated key always shows. Lines with a quote before whitespace (`"k" :`) are
    checked too. Only the suspects are parsed again in Python.
    """
    count = lambda text: lines.str.count_matches(text, literal=True)  # noqa: E731
    # the frame holds exactly the keys' columns (pl.all(): a key may be named "*" or "^...$")
    values = frame.select(pl.sum_horizontal(pl.all().is_not_null())).to_series() if keys else 0
    nulls = count('":null') + count('": null')
    suspect = (count('":') > values + nulls) | lines.str.contains('" ', literal=True) \
        | lines.str.contains('"\t', literal=True)
    for line in lines.filter(suspect):
        try:
            loads(line)
        except RepeatedKey:
            return True
        except ValueError:
            pass
    return False


class RepeatedKey(ValueError):
    """An object names `key` twice."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for k, v in pairs:
        if k in seen:
            raise RepeatedKey(k)
        seen[k] = v
    return seen
