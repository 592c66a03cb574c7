"""Named saved views kept beside the source, shared by everyone who opens it: a page and its
link state (`view_state` query). Anyone may open them; writing them changes what every user
sees, so only administrators may, checked here where the file is written.

Files: `<store>.views.json` beside a DuckDB store, `.ailedger-views.json` inside a bundle
folder (a dotfile: the bundle reader skips it, so a saved view never changes the data).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .access import Principal, require_admin

FOLDER_FILE = ".ailedger-views.json"
# Link keys whose values name tenants or projects (view_state filters, the pages' drill keys).
TENANT_KEYS = ("f_tenant", "tenant")
PROJECT_KEYS = ("project",)
OWNER_KEY, BY_KEY = "owner", "by"  # Compare: owner of the `by` dimension (default tenant); Idle: a project
MAX_VIEWS = 200
MAX_NAME = 80


class SavedViewError(ValueError):
    """A saved-views file that cannot be read or a view that cannot be saved; says why."""


class SavedView(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME)
    page: str = Field(pattern=r"^[a-z0-9_]*$", max_length=40)  # the page's url path ("" = Overview)
    query: dict[str, list[str]]
    saved_by: str = ""
    saved_at: str = ""

    @field_validator("name")
    @classmethod
    def _clean(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("a saved view needs a name")
        return v


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    views: list[SavedView] = []


def views_path(source: str | Path) -> Path:
    p = Path(source)
    return p / FOLDER_FILE if p.is_dir() else p.with_suffix(".views.json")


def load(source: str | Path) -> list[SavedView]:
    """The saved views of a source (none when the file does not exist), sorted by name."""
    path = views_path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SavedViewError(f"cannot read {path}: {exc}") from None
    try:
        data = _File.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise SavedViewError(f"{path} is not a saved-views file: {exc}") from None
    return sorted(data.views, key=lambda v: v.name.casefold())


def visible_to(views: Iterable[SavedView], principal: Principal, projects: Iterable[str]) -> list[SavedView]:
    """The views `principal` may see listed: every one for an administrator; for a scoped user,
    those whose state names no tenant outside the grant and no project but `projects` (theirs).

    A view's name and state are an administrator's words: "rlhf overspend review" with
    `tenant=research` tells a product user what research is looked at for. Opening it would
    show nothing of research (the figures are scoped), but the list itself must not name it.
    """
    views = list(views)
    if principal.is_admin:
        return views
    tenants = set(principal.tenants or ())
    mine = set(projects)

    def names_only_theirs(v: SavedView) -> bool:
        q = v.query
        if any(t not in tenants for k in TENANT_KEYS for t in q.get(k, [])):
            return False
        if any(p not in mine for k in PROJECT_KEYS for p in q.get(k, [])):
            return False
        by = (q.get(BY_KEY) or ["tenant"])[-1]
        owners_named = by in ("tenant", "project")  # a pool's or a model's name is no tenant's
        return not owners_named or all(o in tenants | mine for o in q.get(OWNER_KEY, []))

    return [v for v in views if names_only_theirs(v)]


def _write(source: str | Path, views: list[SavedView]) -> Path:
    path = views_path(source)
    text = _File(views=views).model_dump_json(indent=2)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise SavedViewError(f"cannot write {path}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def save(source: str | Path, name: str, page: str, query: dict[str, list[str]], principal: Principal,
         *, now: datetime | None = None) -> SavedView:
    """Save (or replace) the view `name`; AccessError unless an administrator."""
    require_admin(principal, "save shared views")
    try:
        view = SavedView(name=name, page=page, query=query, saved_by=principal.user or "",
                         saved_at=(now or datetime.now(timezone.utc)).isoformat(timespec="seconds"))
    except ValidationError as exc:
        raise SavedViewError(f"view not saved: {exc.errors()[0]['msg']}") from None
    views = [v for v in load(source) if v.name.casefold() != view.name.casefold()]
    if len(views) >= MAX_VIEWS:
        raise SavedViewError(f"{views_path(source).name} holds {MAX_VIEWS} views already; delete one first")
    _write(source, [*views, view])
    return view


def delete(source: str | Path, name: str, principal: Principal) -> bool:
    """Delete the view `name`; AccessError unless an administrator. False when there was none."""
    require_admin(principal, "delete shared views")
    views = load(source)
    kept = [v for v in views if v.name.casefold() != name.casefold()]
    if len(kept) == len(views):
        return False
    _write(source, kept)
    return True
