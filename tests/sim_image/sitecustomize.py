"""Part of the simulated GKE (tests/sim_gke.py): makes this Python environment look like the NeMo-RL image, where
nbtools is NOT installed. The sim's Ray head (and every job and worker it starts) runs with PYTHONPATH pointing
here; Python imports this module at start-up, after the ``.pth`` files of site-packages have run, and it removes
setuptools' editable-install finder of nbtools (``__editable___nbtools_*_finder``: a ``sys.meta_path`` entry, a
path hook and its placeholder on ``sys.path``). ``import nbtools`` then fails unless the job brings the package
itself: Ray's ``runtime_env={"py_modules": [...]}``, or a program that puts its own checkout on ``sys.path``.
"""

import sys


def _editable(obj) -> bool:
    mod = getattr(obj, "__module__", "") or getattr(type(obj), "__module__", "")
    return mod.startswith("__editable___nbtools")


sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if not (isinstance(p, str) and p.startswith("__editable__.nbtools"))]
sys.path_importer_cache.clear()
