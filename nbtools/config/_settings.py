"""The notebooks' shared settings: which backend and which experiment, chosen once for all nine notebooks.

Why: ``BACKEND`` and ``CONFIG`` used to be set in the first cell of every notebook, so moving to GKE took nine
edits. Now a notebook's first cell leaves them empty (``""``) and :func:`settings` answers, in this order: the
environment (``NBTOOLS_BACKEND``, ``NBTOOLS_EXPERIMENT``), then ``settings.yaml`` in the notebook's directory (the
kernel's working directory), then the defaults (the experiment file's own backend; the checkout's
``experiments/local.yaml``). A value set in the cell, or with ``papermill -p``, overrides all of them.

Example:
    >>> nbtools.config.settings()
    Settings(backend='gke', experiment='../experiments/gke-b200-gemma3-1b.yaml', source=...)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from nbtools.config._yaml import load_yaml
from nbtools.errors import ConfigError

__all__ = ["Settings", "settings", "ENV_BACKEND", "ENV_EXPERIMENT", "SETTINGS_FILE"]

ENV_BACKEND, ENV_EXPERIMENT, SETTINGS_FILE = "NBTOOLS_BACKEND", "NBTOOLS_EXPERIMENT", "settings.yaml"
_KEYS = {"backend": ENV_BACKEND, "experiment": ENV_EXPERIMENT}
_DEFAULT_EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "local.yaml"  # the checkout's demo


@dataclass(frozen=True)
class Settings:
    """The backend (None: the experiment file's own) and the experiment file, and where each came from."""

    backend: str | None
    experiment: str
    source: dict[str, str] = field(default_factory=dict)


def settings(directory: str | os.PathLike | None = None) -> Settings:
    """The shared settings as seen from ``directory`` (default: the working directory, a notebook's own).

    Raises:
        ConfigError: ``settings.yaml`` is not a mapping of ``backend`` / ``experiment``, or no experiment is named
            anywhere and the checkout's ``experiments/local.yaml`` is not there.
    """
    here = Path(directory) if directory is not None else Path.cwd()
    values: dict[str, str] = {}
    source: dict[str, str] = {}
    path = here / SETTINGS_FILE
    if path.is_file():
        data = load_yaml(path.read_text(encoding="utf-8"), source=str(path)) or {}
        bad = sorted(set(data) - set(_KEYS)) if isinstance(data, dict) else ["(not a mapping)"]
        if bad:
            raise ConfigError(f"{path}: unknown key(s) {bad}; allowed: {sorted(_KEYS)}; fix: write `backend: gke` and "
                              "`experiment: ../experiments/FILE.yaml` lines only", source=str(path))
        for key, value in data.items():
            if value not in (None, ""):
                values[key] = str(Path(path.parent, value)) if key == "experiment" else str(value)
                source[key] = str(path)
    for key, env in _KEYS.items():
        if os.environ.get(env):
            value = os.environ[env]
            values[key] = str(Path(here, value).expanduser()) if key == "experiment" else value
            source[key] = f"${env}"
    if "experiment" not in values:
        if not _DEFAULT_EXPERIMENT.is_file():
            raise ConfigError(f"no experiment named: CONFIG is empty, {ENV_EXPERIMENT} is not set and {path} does not "
                              f"exist; fix: set CONFIG in the notebook's first cell, export {ENV_EXPERIMENT}=FILE.yaml, "
                              f"or write `experiment: FILE.yaml` into {SETTINGS_FILE} beside the notebooks")
        values["experiment"], source["experiment"] = str(_DEFAULT_EXPERIMENT), "default"
    return Settings(values.get("backend"), os.path.normpath(values["experiment"]), source)
