"""A TEST STAND-IN for gcsfuse in the simulated GKE: a thread that mirrors a local directory (the pods' ``/data``
stand-in) into a bucket of the GCS emulator, the way the pods' gcsfuse mount makes their writes appear in the bucket.

It is NOT gcsfuse: every ``interval`` seconds it uploads files that are new or changed (size or mtime) since their
last upload and deletes the objects of files that are gone, so a reader of ``gs://bucket/...`` sees the job's files
a moment after they are written, renamed (``tmp_step_N`` -> ``step_N``: new objects, old ones deleted) or removed.
``flush()`` runs one full pass and returns: tests call it before reading the bucket. A process can also ask for a pass
by creating a file in ``requests_dir``; the mirror deletes it after the next complete pass (the sim's jobs do this
when they exit, see sim_image/sitecustomize.py). Uploads go through the emulator's JSON API (``uploadType=media``),
each a new object generation.

Example:
    with BucketMirror(root / "data", gcs_url, "sim-bucket") as m:
        ...                      # jobs write under root/data
        m.flush()                # everything written so far is in gs://sim-bucket/
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from pathlib import Path

import requests

__all__ = ["BucketMirror"]


class BucketMirror:
    """Mirror ``source`` into ``gs://<bucket>/`` of the emulator at ``gcs_url``; a thread polls every ``interval`` s."""

    def __init__(self, source: str | os.PathLike, gcs_url: str, bucket: str, *, interval: float = 0.3,
                 requests_dir: str | os.PathLike | None = None):
        self.source = Path(source)
        self.requests_dir = Path(requests_dir) if requests_dir else None
        self.gcs_url = gcs_url.rstrip("/")
        self.bucket = bucket
        self.interval = interval
        self.uploaded: dict[str, tuple[int, int]] = {}  # object name -> (size, mtime_ns) of the file uploaded
        self.uploads = 0
        self.deletes = 0
        self.last_error: str | None = None  # e.g. the bucket does not exist yet (the plan creates it later)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._session = requests.Session()

    def start(self) -> BucketMirror:
        self.source.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="gcsfuse-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._session.close()

    def __enter__(self) -> BucketMirror:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 - keep mirroring (the emulator may be stopping); flush() raises
                self.last_error = f"{type(e).__name__}: {e}"

    def flush(self) -> dict[str, int]:
        """Sync once, now (new and changed files uploaded, deleted files' objects removed); returns the counts.

        Raises:
            RuntimeError: an upload or delete failed (e.g. the bucket does not exist).
        """
        return self.sync(strict=True)

    def sync(self, *, strict: bool = False) -> dict[str, int]:
        """One pass over ``source``; with ``strict`` a failed request raises instead of being retried next pass."""
        with self._lock:
            asked = list(self.requests_dir.iterdir()) if self.requests_dir else []  # answered after this pass
            seen: dict[str, tuple[int, int]] = {}
            for dirpath, _, files in os.walk(self.source):
                for f in files:
                    p = Path(dirpath, f)
                    try:
                        st = p.lstat()
                    except OSError:  # removed while walking
                        continue
                    if p.is_symlink():
                        continue
                    seen[p.relative_to(self.source).as_posix()] = (st.st_size, st.st_mtime_ns)
            up = dl = 0
            for name, stamp in sorted(seen.items()):
                if self.uploaded.get(name) == stamp:
                    continue
                try:
                    data = (self.source / name).read_bytes()
                except OSError:
                    continue  # gone again before we read it: its deletion is seen next pass
                self._request("POST", f"{self.gcs_url}/upload/storage/v1/b/{self.bucket}/o",
                              params={"uploadType": "media", "name": name}, data=data, strict=strict)
                self.uploaded[name] = stamp  # the stat before the read: a write during the read uploads again
                up += 1
            for name in sorted(set(self.uploaded) - set(seen)):
                self._request("DELETE", f"{self.gcs_url}/storage/v1/b/{self.bucket}/o/{urllib.parse.quote(name, safe='')}",
                              strict=strict, ok=(404,))
                del self.uploaded[name]
                dl += 1
            self.uploads += up
            self.deletes += dl
            for req in asked:
                req.unlink(missing_ok=True)
            if up or dl or strict:
                self.last_error = None
            return {"uploaded": up, "deleted": dl}

    def _request(self, method: str, url: str, *, strict: bool, ok: tuple[int, ...] = (), **kw) -> None:
        r = self._session.request(method, url, timeout=60, **kw)
        if r.status_code >= 300 and r.status_code not in ok:
            msg = f"{method} {url} -> HTTP {r.status_code}: {r.text[:300]}"
            if strict:
                raise RuntimeError(f"gcsfuse stand-in could not mirror into gs://{self.bucket}: {msg}")
            raise OSError(msg)
