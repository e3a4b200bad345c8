"""verl's preparation jobs (GSM8K -> parquet with verl's own preprocessing; the model into the shared HF cache), as
Ray jobs: idempotent, written to a partial directory and moved into place. What they check and write is
``nbtools.trainers.verl.prepare``'s.

Example:
    >>> for spec in nbtools.launch.verl_prepare.prepare_jobs(cfg):
    ...     print(spec.entrypoint)
"""

from __future__ import annotations

import posixpath

from nbtools._escape import sh, sh_echo
from nbtools.config import Experiment
from nbtools.errors import ConfigError
from nbtools.launch._submit import LaunchSpec, metadata, send
from nbtools.launch.runtime_env import env_vars, secret_values, secrets_prelude
from nbtools.trainers import verl as _verl
from nbtools.trainers.verl.prepare import PARTIAL, is_hub_id, require_verl, targets

__all__ = ["data_job", "weights_job", "prepare_jobs", "submit_prepare_jobs"]


def _spec(cfg: Experiment, command: str, sid: str, role: str, *, extra_env: dict | None = None):
    secrets = secret_values(cfg)
    entry = (secrets_prelude() if secrets else "") + command
    env = {"env_vars": {**env_vars(cfg), **(extra_env or {})}}
    return LaunchSpec(entry, sid, env, metadata(cfg, role=role), cfg.backend, cfg.dashboard_url, command,
                      secret_names=tuple(sorted(secrets)))


def data_job(cfg: Experiment):
    """The dataset -> parquet job (a ``LaunchSpec``): verl's script into a partial dir, then moved into place."""

    _verl.prepare_command(cfg)  # raises for a dataset without a known script
    d, train, test = targets(cfg)
    python = cfg.trainer.python or "python3"
    script = _verl.PREPROCESS[cfg.data.dataset.lower()]
    tmp = posixpath.join(d, PARTIAL)
    q = sh
    command = "; ".join([
        "set -e",
        f"if [ -s {q(train)} ] && [ -s {q(test)} ]; then "
        f"{sh_echo(f'nbtools prepare: {train} and {test} already exist; nothing to do')}; exit 0; fi",
        f"rm -rf {q(tmp)}", f"mkdir -p {q(tmp)}",
        f"cd {q(_verl.code_dir(cfg))}",
        f"{q(python)} {script} --local_save_dir {q(tmp)}",
        f"test -s {q(tmp + '/train.parquet')}", f"test -s {q(tmp + '/test.parquet')}",
        f"mv -f {q(tmp + '/test.parquet')} {q(test)}", f"mv -f {q(tmp + '/train.parquet')} {q(train)}",
        f"rm -rf {q(tmp)}",
        sh_echo(f"nbtools prepare: wrote {train} and {test}"),
    ])
    sid = f"{cfg.name}-prep-{cfg.data.dataset.lower()}-{cfg.config_hash(8)}"
    return _spec(cfg, command, sid, "prepare")


def weights_job(cfg: Experiment):
    """The weights-staging job (a ``LaunchSpec``), or None when ``model.name`` is a path (nothing to download).

    Raises:
        ConfigError: the experiment has no shared storage, so there is no cache every node reads.
    """
    name = cfg.model.name
    if not is_hub_id(name):
        return None
    home = cfg.storage.hf_home
    if home is None:
        raise ConfigError("storage.kind: none gives the nodes no shared HF cache to stage weights into; fix: use "
                          "storage.kind: gcsfuse (or nfs), or let each node download the model itself")
    python = cfg.trainer.python or "python3"
    code = (f"from huggingface_hub import snapshot_download; "
            f"print('nbtools prepare: weights in', snapshot_download(repo_id={name!r}))")
    command = f"{sh(python)} -c {sh(code)}"
    sid = f"{cfg.name}-stage-weights-{cfg.config_hash(8)}"
    return _spec(cfg, command, sid, "stage-weights", extra_env={"HF_HOME": home})


def prepare_jobs(cfg: Experiment) -> list:
    """Both jobs (data, then weights when there is a hub model to stage), as LaunchSpecs to show or submit."""
    require_verl(cfg)
    return [s for s in (data_job(cfg), weights_job(cfg)) if s is not None]


def submit_prepare_jobs(cfg: Experiment) -> list:
    """Submit (or re-attach to) every preparation job; returns the ``nbtools.jobs.Job`` list."""
    return [send(spec, cfg) for spec in prepare_jobs(cfg)]
