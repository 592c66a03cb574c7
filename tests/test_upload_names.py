"""The Data page's upload refuses, before writing anything, a zip member name no file system
can hold, and two members (or an uploaded file and a member) that would land on one file or
hold one table in one folder: each named in the message, nothing overwritten silently."""

from __future__ import annotations

import io
import warnings
import zipfile

import pytest

from cost_engine import uploads

ALLOC = b"allocation_id,gpu_id,start,end,owner\na1,g0,2026-10-01T00:00:00Z,2026-10-01T04:00:00Z,p\n"
OTHER = b"allocation_id,gpu_id,start,end,owner\nb1,g1,2026-10-01T00:00:00Z,2026-10-01T02:00:00Z,q\n"


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    """A zip of the members in order; a name may repeat (zipfile only warns about it)."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with zipfile.ZipFile(buf, "w") as z:
            for name, data in members:
                z.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize("name", [
    "a" * 256 + ".csv",                        # one name over 255 bytes
    "bundle/" + "é" * 128 + ".csv",           # 256 + 4 bytes in UTF-8, only 132 characters
    "/".join(["d" * 200] * 6) + "/allocations.csv",  # every part short, the path over 1024 bytes
])
def test_a_member_name_too_long_for_a_file_system_is_refused(tmp_path, name):
    data = _zip([("allocations.csv", ALLOC), (name, b"x")])
    with pytest.raises(uploads.UploadError, match=r"zip member '.*(bytes|characters)") as err:
        uploads.safe_extract(data, tmp_path / "t")
    assert "at most" in str(err.value) and len(str(err.value)) < 300  # named, not dumped whole
    assert not any((tmp_path / "t").iterdir())  # nothing written: refused before the first member
    with pytest.raises(uploads.UploadError, match="zip member"):
        uploads.stage_upload([("b.zip", data)], root=tmp_path / "up")
    assert not any((tmp_path / "up").iterdir())


def test_a_name_of_255_bytes_is_accepted(tmp_path):
    name = "n" * 251 + ".csv"  # 255 bytes: the limit itself
    written = uploads.safe_extract(_zip([("allocations.csv", ALLOC), (name, b"x")]), tmp_path / "t")
    assert sorted(p.name for p in written) == sorted(["allocations.csv", name])


@pytest.mark.parametrize(("members", "both"), [
    ([("allocations.csv", ALLOC), ("allocations.csv", OTHER)],
     "b.zip member 'allocations.csv' and b.zip member 'allocations.csv' both hold the same file 'allocations.csv'"),
    ([("allocations.csv", ALLOC), ("ALLOCATIONS.CSV", OTHER)],
     "b.zip member 'allocations.csv' and b.zip member 'ALLOCATIONS.CSV' both hold the same file 'ALLOCATIONS.CSV'"),
    ([("x/allocations.csv", ALLOC), ("x/allocations.jsonl", b"{}\n")],
     "b.zip member 'x/allocations.csv' and b.zip member 'x/allocations.jsonl' both hold table allocations"),
    ([("allocations.csv.gz", ALLOC), ("./allocations.parquet", b"PAR1")],
     "b.zip member 'allocations.csv.gz' and b.zip member './allocations.parquet' both hold table allocations"),
])
def test_two_members_for_one_file_or_table_are_refused_naming_both(tmp_path, members, both):
    with pytest.raises(uploads.UploadError) as err:
        uploads.stage_upload([("b.zip", _zip(members))], root=tmp_path)
    assert str(err.value) == both + "; upload one of them"
    assert not any(tmp_path.iterdir())  # the staged folder is gone


def test_an_uploaded_file_and_a_member_for_one_table_are_refused(tmp_path):
    """A zip and a loose file, or two loose files with one name: the same check across them."""
    with pytest.raises(uploads.UploadError, match="b.zip member 'allocations.csv' and uploaded file "
                                                  "'allocations.jsonl' both hold table allocations"):
        uploads.stage_upload([("b.zip", _zip([("allocations.csv", ALLOC)])), ("allocations.jsonl", b"{}\n")],
                             root=tmp_path)
    with pytest.raises(uploads.UploadError, match="uploaded file 'allocations.csv' and uploaded file "
                                                  "'allocations.csv' both hold the same file"):
        uploads.stage_upload([("allocations.csv", ALLOC), ("allocations.csv", OTHER)], root=tmp_path)
    with pytest.raises(uploads.UploadError, match="longer than 255 bytes"):
        uploads.stage_upload([("o" * 256 + ".csv", b"x")], root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_same_table_in_two_folders_is_two_bundles_not_a_clash(tmp_path):
    """a/allocations.csv and b/allocations.csv are two bundles: the existing message says so."""
    data = _zip([("a/allocations.csv", ALLOC), ("b/allocations.csv", OTHER)])
    with pytest.raises(uploads.UploadError, match="several bundles"):
        uploads.stage_upload([("b.zip", data)], root=tmp_path)
    one = uploads.stage_upload([("b.zip", _zip([("allocations.csv", ALLOC)]))], root=tmp_path)
    assert one.bundle["allocations"]["allocation_id"].to_list() == ["a1"]


def test_the_import_upload_refuses_a_long_name_and_two_files_of_one_name(tmp_path):
    """The Data page's import of source-system files: the same two checks, before any write."""
    from cost_engine.access import Principal
    from cost_engine.config import parse_config

    admin, cfg = Principal("local", None), parse_config({"period": {"source_timezone": "UTC"}})
    with pytest.raises(uploads.UploadError, match="longer than 255 bytes"):
        uploads.import_upload("slurm", [("s" * 256 + ".txt", b"x")], cfg, root=tmp_path, principal=admin)
    with pytest.raises(uploads.UploadError, match="uploaded files 'sacct.txt' and 'SACCT.txt' have one name"):
        uploads.import_upload("slurm", [("sacct.txt", b"a"), ("SACCT.txt", b"b")], cfg, root=tmp_path,
                              principal=admin)
    assert not any(tmp_path.iterdir())
