"""nbtools.storage against local paths and against a real GCS API emulator (tests/doubles/gcs_emulator.py:
fake-gcs-server, a TEST STAND-IN for Google Cloud Storage) through gcsfs."""

from __future__ import annotations

import os

import pytest

from nbtools import storage
from nbtools.errors import NotFoundError

BUCKET = "sim-bucket"
pytestmark = pytest.mark.usefixtures("storage_cache")  # the gcs fixture: tests/conftest.py


def _put(gcs, key: str, data: bytes) -> str:
    gcs.fs.pipe(f"{BUCKET}/{key}", data)
    return f"gs://{BUCKET}/{key}"


def test_local_paths_are_read_in_place(tmp_path):
    f = tmp_path / "logs" / "exp_001" / "train_data_step1.jsonl"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"0123456789")
    assert storage.fetch(str(f)) == f and storage.mirror(str(tmp_path / "logs")) == tmp_path / "logs"
    assert storage.read_bytes(f"file://{f}", 2, 5) == b"234"
    assert [e.name for e in storage.ls(tmp_path / "logs")] == ["exp_001"] and storage.ls(tmp_path / "logs")[0].is_dir
    before = storage.info(f).version
    f.write_bytes(b"0123456789abc")
    assert storage.info(f).version != before
    assert not (tmp_path / "cache").exists()  # nothing is copied for local files


def test_remote_listing_info_and_ranged_reads(gcs):
    url = _put(gcs, "run1/logs/exp_001/train_data_step1.jsonl", b'{"a":1}\n{"a":2}\n')
    _put(gcs, "run1/logs/exp_001/train_data_step2.jsonl", b'{"a":3}\n')
    names = [e.name for e in storage.ls(f"gs://{BUCKET}/run1/logs/exp_001")]
    assert names == ["train_data_step1.jsonl", "train_data_step2.jsonl"]
    e = storage.info(url)
    assert e.size == 16 and e.version and not e.is_dir
    assert storage.info(f"gs://{BUCKET}/run1/logs").is_dir
    assert storage.read_bytes(url, 8, 15) == b'{"a":2}'
    assert storage.info(f"gs://{BUCKET}/run1/nothing") is None and not storage.exists(f"gs://{BUCKET}/nope")


def test_fetch_downloads_once_per_generation_and_again_after_a_rewrite(gcs):
    url = _put(gcs, "run2/step_1/training_info.json", b'{"step": 1}')
    p = storage.fetch(url)
    assert p.read_bytes() == b'{"step": 1}' and str(p).startswith(str(storage.cache_root()))
    mtime = p.stat().st_mtime_ns
    assert storage.fetch(url) == p and p.stat().st_mtime_ns == mtime  # cached: not fetched again
    _put(gcs, "run2/step_1/training_info.json", b'{"step": 1, "val:accuracy": 0.5}')  # new generation
    assert storage.fetch(url).read_bytes() == b'{"step": 1, "val:accuracy": 0.5}'


def test_mirror_fetches_only_new_or_rewritten_objects_and_drops_vanished_ones(gcs):
    base = f"gs://{BUCKET}/run3/logs/exp_001"
    for i in (1, 2, 3):
        _put(gcs, f"run3/logs/exp_001/train_data_step{i}.jsonl", f'{{"step": {i}}}\n'.encode())
    _put(gcs, "run3/logs/exp_001/tensorboard/events.out.tfevents.1.host", b"tb")
    only_jsonl = lambda rel: rel.endswith(".jsonl")  # noqa: E731
    d = storage.mirror(base, include=only_jsonl)
    assert sorted(p.name for p in d.glob("*.jsonl")) == [f"train_data_step{i}.jsonl" for i in (1, 2, 3)]
    assert not (d / "tensorboard").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in d.glob("*.jsonl")}
    _put(gcs, "run3/logs/exp_001/train_data_step2.jsonl", b'{"step": 2, "rewritten": true}\n')
    _put(gcs, "run3/logs/exp_001/train_data_step4.jsonl", b'{"step": 4}\n')
    gcs.fs.rm(f"{BUCKET}/run3/logs/exp_001/train_data_step1.jsonl")
    d2 = storage.mirror(base, include=only_jsonl)
    assert d2 == d
    assert sorted(p.name for p in d.glob("*.jsonl")) == [f"train_data_step{i}.jsonl" for i in (2, 3, 4)]
    assert (d / "train_data_step2.jsonl").read_bytes() == b'{"step": 2, "rewritten": true}\n'
    assert (d / "train_data_step3.jsonl").stat().st_mtime_ns == stamps["train_data_step3.jsonl"]  # untouched
    (d / ".nbtools").mkdir()
    (d / ".nbtools" / "index").write_text("a reader's own cache beside the copies")
    storage.mirror(base, include=only_jsonl)
    assert (d / ".nbtools" / "index").exists()  # only copies the mirror made are ever removed


def test_missing_remote_paths_and_paths_outside_the_mount_name_the_fix(gcs):
    with pytest.raises(NotFoundError, match="found nothing"):
        storage.mirror(f"gs://{BUCKET}/no/such/run")
    with pytest.raises(NotFoundError, match="check the URL"):
        storage.fetch(f"gs://{BUCKET}/no/such/file")
    rs = storage.RunStorage(f"gs://{BUCKET}", "/data")
    assert rs.url("/data/nemo-rl/x/logs") == f"gs://{BUCKET}/nemo-rl/x/logs"
    assert rs.url("/data") == f"gs://{BUCKET}" and rs.cluster_path(f"gs://{BUCKET}/a/b") == "/data/a/b"
    with pytest.raises(NotFoundError, match="put the run's directories under /data/"):
        rs.url("/opt/nemo-rl/logs")
    assert storage.RunStorage("/tmp/runs").url("/tmp/runs/x") == "/tmp/runs/x"


def test_the_emulator_is_what_gcsfs_talks_to(gcs):
    assert os.environ["STORAGE_EMULATOR_HOST"] == gcs.url
    fs, path = storage.filesystem(f"gs://{BUCKET}/x")
    assert path == f"{BUCKET}/x" and gcs.url in str(getattr(fs, "_endpoint", "") or fs.base)


def test_a_tampered_or_replaced_cached_copy_is_never_served(gcs, monkeypatch):
    """#31: a same-size edit of the cached copy is downloaded again; a directory there is named; downloads are
    checked against the MD5 in the object's metadata."""
    import shutil

    from nbtools.errors import ConflictError, NotReadyError

    url = _put(gcs, "cache/step1.jsonl", b'{"reward": 0.25}\n' * 100)
    entry = storage.info(url)
    assert entry.md5  # the emulator reports md5Hash as GCS does
    p = storage.fetch(url)
    p.write_bytes(p.read_bytes().replace(b"0.25", b"0.75"))  # same size, other bytes
    assert storage.fetch(url).read_bytes() == b'{"reward": 0.25}\n' * 100
    assert storage.fetch_many([(url, entry)])[0].read_bytes() == b'{"reward": 0.25}\n' * 100
    os.unlink(p)
    p.mkdir()  # something put a directory where the copy belongs
    with pytest.raises(ConflictError, match=rf"(?s)the cached copy of {url} at {p} is a directory.*fix: delete"):
        storage.fetch(url)
    shutil.rmtree(p)
    fs, _ = storage.filesystem(url)
    real_get = fs.get

    def damaging_get(rpath, lpath, *a, **k):  # a download that arrives damaged (same size)
        out = real_get(rpath, lpath, *a, **k)
        for lp in [lpath] if isinstance(lpath, str) else lpath:
            data = bytearray(open(lp, "rb").read())
            data[0] ^= 1
            open(lp, "wb").write(bytes(data))
        return out

    monkeypatch.setattr(fs, "get", damaging_get)
    with pytest.raises(NotReadyError, match=r"does not match the object's MD5"):
        storage.fetch(url)
    assert not p.exists()  # nothing damaged was put in place


def test_errors_keep_their_kind_on_disk_and_in_a_bucket(gcs, tmp_path):
    """#26 item 7: one code path per verb, so a missing path, a file where a directory is expected and a directory
    where a file is expected raise the same typed error on both storages."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.txt").write_text("x")
    _put(gcs, "kinds/d/f.txt", b"x")
    for base in (str(tmp_path), f"gs://{BUCKET}/kinds"):
        with pytest.raises(NotFoundError, match=r"expected a directory at \S+/nope, found nothing there"):
            storage.ls(storage.join(base, "nope"))
        with pytest.raises(NotFoundError, match=r"expected a directory at \S+/d/f\.txt, found a file"):
            storage.ls(storage.join(base, "d", "f.txt"))
        with pytest.raises(NotFoundError, match=r"expected a file at \S+/d/nope\.txt, found nothing there"):
            storage.read_bytes(storage.join(base, "d", "nope.txt"))
        with pytest.raises(NotFoundError, match=r"expected a file at \S+/d, found a directory"):
            storage.fetch(storage.join(base, "d"))
        with pytest.raises(NotFoundError, match=r"expected a directory at \S+/d/f\.txt, found a file"):
            storage.mirror(storage.join(base, "d", "f.txt"))
        assert storage.info(storage.join(base, "nope")) is None and storage.glob(storage.join(base, "nope"), "*") == []


def test_permission_denied_is_a_permission_error_on_disk_and_in_a_bucket(tmp_path, monkeypatch):
    """Not a NotFoundError (the old remote branch said "not found" for a 403): the error says permission and how to
    get it. The bucket is a stand-in answering 403 as GCS does; on disk root ignores chmod, so os.scandir refuses."""
    from gcs_emulator import ForbiddingGcs

    from nbtools.errors import AccessDeniedError, NbtoolsError

    with ForbiddingGcs():
        for call in (storage.ls, storage.info, storage.read_bytes):
            with pytest.raises(AccessDeniedError, match=r"(?s)permission denied on gs://theirs/x.*storage\.objects\.list"
                                                        r".*roles/storage\.objectViewer") as e:
                call("gs://theirs/x")
            assert isinstance(e.value, PermissionError) and isinstance(e.value, NbtoolsError)
            assert not isinstance(e.value, FileNotFoundError)
    (tmp_path / "locked").mkdir()

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "scandir", refuse)
    with pytest.raises(AccessDeniedError, match=r"(?s)permission denied on \S+/locked.*fix: make it readable"):
        storage.ls(tmp_path / "locked")
