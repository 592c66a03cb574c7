"""Importing source-system files from the Data page: into a new bundle, or into the open store."""

from __future__ import annotations

from pathlib import Path

import pytest

from cost_engine import store
from cost_engine.bundle import read_bundle
from cost_engine.config import parse_config
from cost_engine.access import Principal
from cost_engine.uploads import UploadError, import_upload

FIX = Path(__file__).resolve().parent / "fixtures" / "importers"
CFG = parse_config({"period": {"source_timezone": "UTC"}})
ADMIN = Principal("local", None)  # imports are for administrators (tests/test_shared_writes.py)


def sacct() -> list[tuple[str, bytes]]:
    return [("sacct.txt", (FIX / "sacct.txt").read_bytes())]


def test_import_into_a_new_bundle_folder(tmp_path):
    done = import_upload("slurm", sacct(), CFG, root=tmp_path, principal=ADMIN)
    assert not done.into_store
    counts = done.result.counts()
    assert counts["allocations"] > 0
    b = read_bundle(done.target, CFG)
    assert b["allocations"].height == counts["allocations"]


def test_import_into_the_open_store_is_idempotent(tmp_path):
    db = tmp_path / "s.duckdb"
    first = import_upload("slurm", sacct(), CFG, store_path=db, root=tmp_path, principal=ADMIN)
    n = store.load_bundle(db)["allocations"].height
    assert first.into_store and n == first.result.counts()["allocations"]
    import_upload("slurm", sacct(), CFG, store_path=db, root=tmp_path, principal=ADMIN)
    assert store.load_bundle(db)["allocations"].height == n


def test_bad_names_and_formats_are_refused(tmp_path):
    with pytest.raises(UploadError, match="plain file name"):
        import_upload("slurm", [("../x.txt", b"")], CFG, root=tmp_path, principal=ADMIN)
    with pytest.raises(UploadError, match="unknown import format"):
        import_upload("nope", sacct(), CFG, root=tmp_path, principal=ADMIN)
    with pytest.raises(UploadError, match="over the limit"):
        import_upload("slurm", sacct(), CFG, root=tmp_path, max_bytes=10, principal=ADMIN)


def test_nothing_imported_is_refused_with_the_reason(tmp_path):
    """The OpenAI reference page is not grouped by project or model: no row can be made, so the
    upload is refused (as the CLI exits 1) and nothing is written to the store."""
    page = Path(__file__).resolve().parent / "fixtures" / "real" / "openai_openapi_usage_completions.json"
    db = tmp_path / "s.duckdb"
    with pytest.raises(UploadError, match="nothing imported; most common reason: usage without project_id and "
                                          "model: query with group_by=project_id,model"):
        import_upload("openai", [(page.name, page.read_bytes())], CFG, store_path=db, root=tmp_path,
                      principal=ADMIN)
    assert not db.exists()
