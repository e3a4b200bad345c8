"""Part of the simulated GKE (tests/doubles/sim_gke.py): makes this Python environment look like the NeMo-RL image, where
nbtools is NOT installed. The sim's Ray head (and every job and worker it starts) runs with PYTHONPATH pointing
here; Python imports this module at start-up, after the ``.pth`` files of site-packages have run, and it removes
setuptools' editable-install finder of nbtools (``__editable___nbtools_*_finder``: a ``sys.meta_path`` entry, a
path hook and its placeholder on ``sys.path``). ``import nbtools`` then fails unless the job brings the package
itself: Ray's ``runtime_env={"py_modules": [...]}``, or a program that puts its own checkout on ``sys.path``.

It also makes a Ray job's processes wait at exit until the sim's gcsfuse stand-in has uploaded what they wrote
(``SIM_GKE_FLUSH_DIR``), so a job that ended SUCCEEDED has its files in the bucket, as with gcsfuse on GKE.
"""

import sys


def _editable(obj) -> bool:
    mod = getattr(obj, "__module__", "") or getattr(type(obj), "__module__", "")
    return mod.startswith("__editable___nbtools")


sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if not (isinstance(p, str) and p.startswith("__editable__.nbtools"))]
sys.path_importer_cache.clear()


def _wait_for_gcsfuse() -> None:
    """A job's process exits only once what it wrote is in the bucket, as with gcsfuse (which uploads a file when it
    is closed): ask the sim's gcsfuse stand-in for a pass and wait for it (at most a minute)."""
    import os
    import time

    req = os.path.join(os.environ["SIM_GKE_FLUSH_DIR"], f"req-{os.getpid()}-{time.monotonic_ns()}")
    try:
        open(req, "w").close()
    except OSError:
        return
    end = time.monotonic() + 60
    while os.path.exists(req) and time.monotonic() < end:
        time.sleep(0.05)


def _register() -> None:
    import atexit
    import os

    # only a Ray job's driver and what it starts (Ray sets this variable for them, not for Ray's own processes)
    if os.environ.get("SIM_GKE_FLUSH_DIR") and os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        atexit.register(_wait_for_gcsfuse)


_register()
