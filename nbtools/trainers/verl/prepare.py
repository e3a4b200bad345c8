"""Before a verl run: the parquet files its command names, and the model weights in the shared HF cache.

Why: ``main_ppo`` reads ``data.train_files`` / ``data.val_files`` at start and dies (after minutes of Ray and vLLM
start-up) when they are absent; and without staged weights every node downloads the model into the HF cache on the
shared mount at once (tutorial 002 uploads it beforehand). Two idempotent Ray jobs do both once:

- data: verl's own preprocessing script (``examples/data_preprocess/gsm8k.py`` in the verl checkout, v0.7.0:
  ``--local_save_dir DIR`` writes ``train.parquet`` and ``test.parquet``) into a hidden ``.nbtools-prepare.partial``
  dir beside the targets, then both files are moved into place; a job that finds both files does nothing, and one
  killed midway leaves no file that looks complete;
- weights: ``huggingface_hub.snapshot_download(model)`` with the job's ``HF_HOME`` (the shared cache the training job
  reads), which skips files already there.

:func:`check_data` is the lint rule: blocking when the files are known to be absent; :func:`check_weights` warns
when the model is known not to be staged (the run still works, each node downloading it).

Example:
    >>> for spec in nbtools.launch.prepare_jobs(cfg):   # the jobs below, as submissions
    ...     print(spec.submission_id, spec.command)
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

import nbtools.trainers.verl._command as verl
from nbtools._escape import sh, sh_echo
from nbtools.config import Experiment
from nbtools.errors import ConfigError, Fix
from nbtools.trainers._prepare import PrepareJob

__all__ = ["data_files", "targets", "check_data", "data_present", "weights_dir", "check_weights", "is_hub_id",
           "require_verl", "PARTIAL", "data_job", "weights_job", "prepare_jobs"]

PARTIAL = ".nbtools-prepare.partial"


def data_files(cfg: Experiment) -> list[str]:
    """The parquet files the training command names (``data.train_files``, ``data.val_files``; overrides win)."""
    eff = verl.effective(cfg)
    out = []
    for key in ("data.train_files", "data.val_files"):
        value = eff.get(key, "")
        items = value[1:-1].split(",") if value.startswith("[") and value.endswith("]") else [value]
        out += [verl.hydra_unquote(v) for v in items if v.strip()]
    return out


def targets(cfg: Experiment) -> tuple[str, str, str]:
    """(dir, train file, test file) the preparation writes: those the command names, in one directory."""
    files = data_files(cfg)
    dirs = {posixpath.dirname(f) for f in files}
    names = sorted(posixpath.basename(f) for f in files)
    if len(files) != 2 or len(dirs) != 1 or names != ["test.parquet", "train.parquet"]:
        raise ConfigError(
            f"data: the command reads {files}, but verl's preprocessing writes DIR/train.parquet and DIR/test.parquet; "
            "fix: drop the data.train_files / data.val_files overrides and set `data.data_dir: DIR`, or prepare those "
            "files yourself")
    d = dirs.pop()
    return d, posixpath.join(d, "train.parquet"), posixpath.join(d, "test.parquet")


def is_hub_id(name: str) -> bool:
    return not name.startswith(("/", ".", "~", "gs://")) and name.count("/") == 1


PROBE_SECONDS = 15.0  # a lint check that cannot see the bucket in this time says "unknown", never hangs the launch


def _present(url: str) -> bool | None:
    """Whether ``url`` exists; None when the storage does not answer in ``PROBE_SECONDS`` or at all.

    Why a deadline: gcsfs retries an unreachable endpoint with backoff for minutes; lint must answer promptly on a
    laptop without network, and an unknown file is a warning-free "cannot tell", not a blocking finding.
    """
    import threading

    from nbtools import storage

    answer: list[bool | None] = [None]

    def probe() -> None:
        try:
            answer[0] = storage.info(url) is not None
        except Exception:  # noqa: BLE001 - no credentials, no network: unknown
            answer[0] = None

    t = threading.Thread(target=probe, name="nbtools-probe", daemon=True)  # a daemon: never holds up the exit
    t.start()
    t.join(PROBE_SECONDS)
    return None if t.is_alive() else answer[0]


def data_present(cfg: Experiment, exists: Callable[[str], bool] | None = None) -> dict[str, bool | None]:
    """{file: present} for each parquet file the command names; None where it cannot be seen from here.

    Args:
        exists: how to check one cluster path (default: where this machine reads it, ``cfg.url``: a local
            path or the bucket behind the mount).
    """
    from nbtools import storage

    out: dict[str, bool | None] = {}
    for f in data_files(cfg):
        if exists is not None:
            out[f] = bool(exists(f))
            continue
        try:
            url = cfg.url(f)
            if not storage.is_remote(url) and not storage.local_path(url).parent.exists():
                out[f] = None  # the mount is not on this machine: unknown, not absent
                continue
            out[f] = _present(url)
        except Exception:  # noqa: BLE001 - no credentials / no network: unknown
            out[f] = None
    return out


def check_data(cfg: Experiment, r, exists: Callable[[str], bool] | None = None) -> None:
    """Lint rule ``verl-data``: blocking when a parquet file the command names is known to be absent."""
    from nbtools.trainers._findings import Finding

    r.checked.append("verl-data")
    missing = [f for f, ok in data_present(cfg, exists).items() if ok is False]
    if missing:
        r.findings.append(Finding(
            "blocking", "verl-data", "data.data_dir",
            f"{', '.join(missing)} not found: verl.trainer.main_ppo reads it at start and fails after the cluster "
            "spent minutes starting Ray and vLLM",
            Fix("run the preparation job first: nbtools.launch.prepare(cfg) (or `nbtools "
                "prepare EXPERIMENT.yaml --apply`), or point data.data_dir at the parquet files",
                cli="run the preparation job first: `nbtools prepare EXPERIMENT.yaml --apply`, or point data.data_dir "
                    "at the parquet files"),
        ))


def weights_dir(cfg: Experiment) -> str | None:
    """Where the staged model lives in the shared cache (``$HF_HOME/hub/models--ORG--NAME``; huggingface_hub's
    layout), or None for a model given as a path or without shared storage."""
    home = cfg.storage.hf_home
    if home is None or not is_hub_id(cfg.model.name):
        return None
    return posixpath.join(home, "hub", "models--" + cfg.model.name.replace("/", "--"))


def check_weights(cfg: Experiment, r, exists: Callable[[str], bool] | None = None) -> None:
    """Lint rule ``verl-weights``: a warning when the model is known not to be in the shared HF cache."""
    from nbtools import storage
    from nbtools.trainers._findings import Finding

    r.checked.append("verl-weights")
    d = weights_dir(cfg)
    if d is None:
        return
    snapshots = posixpath.join(d, "snapshots")
    if exists is not None:
        present: bool | None = bool(exists(snapshots))
    else:
        try:
            url = cfg.url(snapshots)
            visible = storage.is_remote(url) or storage.local_path(url).parents[2].exists()
            present = _present(url) if visible else None
        except Exception:  # noqa: BLE001 - no credentials / not under the mount: unknown
            present = None
    if present is False:
        r.findings.append(Finding(
            "warning", "verl-weights", "model.name",
            f"{cfg.model.name} is not staged in {d}: every node downloads it when the job starts, into the shared "
            "cache at the same time",
            "stage it once first: `nbtools prepare EXPERIMENT.yaml --apply` (the weights job)",
        ))



def require_verl(cfg: Experiment) -> None:
    """The preparation jobs are verl's; any other trainer gets the error naming the fix."""
    if (cfg.trainer.kind or "") != "verl":
        raise ConfigError(f"trainer.kind: {cfg.trainer.kind!r}; the preparation jobs are verl's (GSM8K -> parquet, "
                          "weights into the shared HF cache); fix: use a verl experiment")


def data_job(cfg: Experiment) -> PrepareJob:
    """The dataset -> parquet job: verl's script into a partial dir, then moved into place (nothing when both files
    are there)."""
    verl.prepare_command(cfg)  # raises for a dataset without a known script
    d, train, test = targets(cfg)
    python = cfg.trainer.python or "python3"
    script = verl.PREPROCESS[cfg.data.dataset.lower()]
    tmp = posixpath.join(d, PARTIAL)
    q = sh
    command = "; ".join([
        "set -e",
        f"if [ -s {q(train)} ] && [ -s {q(test)} ]; then "
        f"{sh_echo(f'nbtools prepare: {train} and {test} already exist; nothing to do')}; exit 0; fi",
        f"rm -rf {q(tmp)}", f"mkdir -p {q(tmp)}",
        f"cd {q(verl.code_dir(cfg))}",
        f"{q(python)} {script} --local_save_dir {q(tmp)}",
        f"test -s {q(tmp + '/train.parquet')}", f"test -s {q(tmp + '/test.parquet')}",
        f"mv -f {q(tmp + '/test.parquet')} {q(test)}", f"mv -f {q(tmp + '/train.parquet')} {q(train)}",
        f"rm -rf {q(tmp)}",
        sh_echo(f"nbtools prepare: wrote {train} and {test}"),
    ])
    return PrepareJob("prepare", f"{cfg.name}-prep-{cfg.data.dataset.lower()}-{cfg.config_hash(8)}", command)


def weights_job(cfg: Experiment) -> PrepareJob | None:
    """The weights-staging job, or None when ``model.name`` is a path (nothing to download).

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
    return PrepareJob("stage-weights", f"{cfg.name}-stage-weights-{cfg.config_hash(8)}", f"{sh(python)} -c {sh(code)}",
                      {"HF_HOME": home})


def prepare_jobs(cfg: Experiment) -> list[PrepareJob]:
    """Both jobs (data, then weights when there is a hub model to stage): what ``nbtools.launch.prepare`` runs."""
    require_verl(cfg)
    return [j for j in (data_job(cfg), weights_job(cfg)) if j is not None]
