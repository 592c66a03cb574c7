"""JSON for people and programs (the report, explain, scenario): a non-finite number is refused
with the place it sits, never printed as a bare NaN or Infinity, which no JSON parser accepts."""

from __future__ import annotations

import json
import math
from typing import Any


class NonFiniteError(ValueError):
    """A number to print is NaN or infinite: the figure is broken, and JSON cannot say so."""


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps(obj, allow_nan=False, **kwargs); NonFiniteError names the first bad value's path.

    Unknown figures are None (null) by the contract: a NaN or inf reaching here is a fault
    upstream, and printing it would hand the reader invalid JSON or a silently wrong number.
    """
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise
        where, value = _first_non_finite(obj, "$") or ("(unknown place)", "?")
        raise NonFiniteError(f"refusing to write invalid JSON: {where} is {value}") from None


def _first_non_finite(obj: Any, path: str) -> tuple[str, str] | None:
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path, repr(obj))
    if isinstance(obj, dict):
        items = ((f"{path}.{k}", v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    for sub_path, value in items:
        found = _first_non_finite(value, sub_path)
        if found is not None:
            return found
    return None
