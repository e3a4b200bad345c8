"""Jobs that run nbtools' own code inside the cluster (the merge, say) carry the package with them.

Why: the NeMo-RL image does not contain nbtools, and the PyPI project named ``nbtools`` is someone else's, so
"pip install it" on the cluster would install the wrong thing. Ray's ``runtime_env`` ``py_modules`` uploads this
very package (the code the notebook runs) to the cluster's object store once per content hash and puts it first on
the job's ``PYTHONPATH``; the job then runs ``python -m nbtools.<module>`` with the image's own torch and friends.
A job prints its result as one JSON line (``NBTOOLS_RESULT {...}``), which :func:`result_of` reads back.

Example:
    >>> job = submit_module(cfg.dashboard_url, submission_id="exp-merge-step-30-1a2b3c4d",
    ...                     module="nbtools.checkpoints", args=["merge", src, out], python="python")
    >>> result_of(job.wait(timeout=1800) and job)
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from nbtools._escape import sh_join
from nbtools.errors import Fix, NotFoundError

__all__ = ["package_dir", "carry_env", "helper_id", "submit_module", "RESULT_PREFIX", "print_result", "result_of"]

RESULT_PREFIX = "NBTOOLS_RESULT "
_EXCLUDES = ["**/__pycache__", "**/*.pyc", "**/.ipynb_checkpoints"]


def package_dir() -> Path:
    """The directory of the nbtools package this Python imports (what ``py_modules`` uploads)."""
    return Path(__file__).resolve().parents[1]  # nbtools/jobs/carry.py -> nbtools/


def carry_env(env_vars: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``runtime_env`` that ships this nbtools package to the job (plus ``env_vars``)."""
    renv: dict[str, Any] = {"py_modules": [str(package_dir())], "excludes": list(_EXCLUDES)}
    if env_vars:
        renv["env_vars"] = dict(env_vars)
    return renv


def helper_id(experiment: str, purpose: str, *key: Any) -> str:
    """``<experiment>-<purpose>-<hash of key>``: one id per experiment, purpose and inputs, so a re-run re-attaches
    to the same job, another experiment never does, and notebook 09's stop-by-prefix finds it."""
    digest = hashlib.sha256(json.dumps([str(k) for k in key]).encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9-]+", "-", purpose.lower()).strip("-")
    return f"{experiment}-{slug}-{digest}"


def submit_module(address: str, *, submission_id: str, module: str, args: list[str], python: str = "python",
                  env_vars: dict[str, str] | None = None, metadata: dict[str, str] | None = None,
                  num_cpus: float = 1):
    """Submit ``python -m <module> <args>`` as a Ray job carrying nbtools (re-attaches when the id exists)."""
    from nbtools import jobs

    entrypoint = sh_join([python, "-m", module, *map(str, args)])
    return jobs.submit(address, entrypoint=entrypoint, submission_id=submission_id, runtime_env=carry_env(env_vars),
                       metadata={"nbtools.role": module.rsplit(".", 1)[-1], **(metadata or {})},
                       entrypoint_num_cpus=num_cpus)


def print_result(data: dict[str, Any]) -> None:
    """Inside a job: print the result line :func:`result_of` looks for."""
    print(RESULT_PREFIX + json.dumps(data, default=str), flush=True)


def result_of(job) -> dict[str, Any]:
    """The last result line a finished job printed.

    Raises:
        NotFoundError: the job printed none (its log tail is in the message).
    """
    text = job.logs()
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = "\n".join(text.splitlines()[-15:])
    raise NotFoundError(f"job {job.id!r} printed no result line ({RESULT_PREFIX.strip()} …); last lines:\n{tail}",
                        fix=Fix("read its whole log with job.logs(); fix the cause and run the cell again",
                            cli="read its whole log (`nbtools jobs logs EXPERIMENT.yaml --id ID`); fix the cause and run the command again"))
