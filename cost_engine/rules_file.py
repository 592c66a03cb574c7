"""The rules config kept beside a source (`ailedger.toml` in a bundle folder, `<store>.toml`
beside a store): every user of the dashboard and the CLI reads it, so writing it is for
administrators only, checked here where the file is written (not only by hiding a button)."""

from __future__ import annotations

import os
import tomllib
import uuid
from pathlib import Path

from .access import Principal, require_admin
from .api import CONFIG_NAME
from .config import Config, dump_config, parse_config


def rules_path(source: str | Path) -> Path:
    """Where the source's own config lives (what api.find_config reads when none is given)."""
    p = Path(source)
    return p / CONFIG_NAME if p.is_dir() else p.with_suffix(".toml")


def write_rules(source: str | Path, config: Config, principal: Principal) -> Path:
    """Write `config` as the source's config, atomically; AccessError unless an administrator.

    The text is parsed back before it replaces the file, so a config that would not load is
    never written.
    """
    target = rules_path(source)
    require_admin(principal, f"write the shared rules ({target.name})")
    text = dump_config(config)
    parse_config(tomllib.loads(text))
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
