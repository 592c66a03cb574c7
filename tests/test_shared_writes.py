"""Writes that every user sees are for administrators only, refused where the write happens
(issue 17, item 1): the rules config beside a source, the alias table, imports into the store.

On main a tenant-scoped user could write `idle = "proportional"` into the store's config from
the Rules page, moving product's cost from 1,690.71 to 2,009.79 for everyone; the page wrote
the file itself. Now the library functions that write refuse a non-admin principal, before
anything is touched (tests/test_browser_access.py drives the page as that user).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from cost_engine import store, uploads
from cost_engine.access import AccessError, Principal
from cost_engine.config import load_config
from cost_engine.rules_file import rules_path, write_rules
from cost_engine.views import config_with
from tests.dashboard_support import copy_sample, make_store

ADMIN = Principal("root", None)
ALICE = Principal("alice@example.com", frozenset({"research"}))


def test_rules_are_written_by_an_admin_only(tmp_path: Path) -> None:
    folder = copy_sample(tmp_path / "fw")
    target = rules_path(folder)
    before = target.read_bytes()
    proportional = config_with(load_config(target), idle="proportional")
    with pytest.raises(AccessError, match="alice@example.com may not write the shared rules"):
        write_rules(folder, proportional, ALICE)
    assert target.read_bytes() == before

    assert write_rules(folder, proportional, ADMIN) == target
    saved = load_config(target)
    assert saved.allocation.idle == "proportional" and saved.period == proportional.period


def test_rules_of_a_store_sit_beside_it(tmp_path: Path) -> None:
    db = make_store(tmp_path / "s")
    assert rules_path(db) == db.with_suffix(".toml")
    before = db.with_suffix(".toml").read_bytes()
    with pytest.raises(AccessError):
        write_rules(db, config_with(load_config(db.with_suffix(".toml")), idle="proportional"), ALICE)
    assert db.with_suffix(".toml").read_bytes() == before


def test_aliases_are_saved_by_an_admin_only(tmp_path: Path) -> None:
    folder = copy_sample(tmp_path / "fw")
    before = (folder / "aliases.csv").read_bytes()
    edited = pl.DataFrame({"source": ["gateway"], "key": ["new-key"], "project": ["rlhf"]})
    with pytest.raises(AccessError, match="may not save aliases"):
        uploads.save_aliases(folder, edited, principal=ALICE)
    assert (folder / "aliases.csv").read_bytes() == before

    db = make_store(tmp_path / "s")
    version = store.data_version(db)
    with pytest.raises(AccessError):
        uploads.save_aliases(db, edited, principal=ALICE)
    assert store.data_version(db) == version
    assert uploads.save_aliases(db, edited, principal=ADMIN).written == 1
    assert store.data_version(db) != version


def test_imports_are_for_admins_only(tmp_path: Path) -> None:
    db = make_store(tmp_path / "s")
    version = store.data_version(db)
    with pytest.raises(AccessError, match="may not import data"):
        uploads.import_upload("slurm", [("sacct.txt", b"JobID|Account\n")], None, store_path=db,
                              root=tmp_path / "up", principal=ALICE)
    assert store.data_version(db) == version
    assert not (tmp_path / "up").exists()  # refused before anything was written
