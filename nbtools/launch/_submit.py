"""Build a run's Ray job (the exact command, runtime env, submission id) and submit it, or re-attach to it.

Why: what is sent is shown before it is sent (``LaunchSpec``), and re-running the launch cell finds the job with the
same submission id instead of starting a second one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nbtools import _paths, backends, trainers
from nbtools._escape import html as _h
from nbtools.config import Experiment
from nbtools.errors import Fix, LintError, NotFoundError
from nbtools.launch.lint import StepsSource, lint_for
from nbtools.launch.runtime_env import env_vars_for, secret_values, secrets_prelude, upload_working_dir

__all__ = ["LaunchSpec", "build", "metadata", "send", "submit", "follow"]


@_paths.tidy_reprs
@dataclass(frozen=True)
class LaunchSpec:
    """Everything a submission sends, shown before it is sent (secrets are never part of it)."""

    entrypoint: str
    submission_id: str
    runtime_env: dict[str, Any]
    metadata: dict[str, str]
    backend: str
    address: str
    command: str  # the trainer command alone (what you would paste into a shell on the head)
    files: dict[str, bytes] = field(default_factory=dict)  # uploaded in the job's working_dir
    secret_names: tuple[str, ...] = ()  # env vars delivered through the working_dir secrets file (names only)
    lines: tuple[str, ...] = ()  # the command split for display (head, then one override per line)

    def pretty(self) -> str:
        """The command with one override per line, ready to copy into a shell."""
        return " \\\n    ".join(self.lines) if self.lines else self.command

    def __str__(self) -> str:
        return self.entrypoint

    def _repr_html_(self) -> str:
        env = self.runtime_env.get("env_vars", {})
        rows = "".join(f"<tr><td><code>{_h(k)}</code></td><td><code>{_h(str(v))}</code></td></tr>" for k, v in env.items())
        extra = ""
        if self.files:
            extra += f"<p>working_dir files: {', '.join(_h(f) for f in self.files)}</p>"
        if self.secret_names:
            extra += (
                f"<p>secrets from your environment: {', '.join(self.secret_names)} (in a working_dir file the job "
                "deletes on start; values never shown)</p>"
            )
        return (
            f"<b>{_h(self.backend)} job <code>{_h(self.submission_id)}</code></b> "
            f"&rarr; {_h(self.address)}<pre>{_h(_paths.pasteable(self.pretty()))}</pre>"  # copyable where it is shown
            f"<details><summary>runtime env ({len(env)} vars)</summary><table>{rows}</table></details>{extra}"
        )


def metadata(cfg: Experiment, *, role: str = "train", trainer: trainers.Trainer | None = None) -> dict[str, str]:
    return metadata_for(cfg, trainer or trainers.get(cfg), role=role)


def metadata_for(cfg: Experiment, trainer: trainers.Trainer, *, role: str = "train") -> dict[str, str]:
    """:func:`metadata` with the trainer the caller resolved once."""
    return {
        "nbtools.experiment": cfg.name,
        "nbtools.config_hash": cfg.config_hash(),
        "nbtools.backend": cfg.backend,
        "nbtools.role": role,
        "nbtools.trainer": trainer.name,
        **trainer.metadata(),  # a cluster trainer's image, release and directories; none for the CPU rehearsal
    }


def build(cfg: Experiment, *, trainer: trainers.Trainer | None = None,
          backend: backends.Backend | None = None) -> LaunchSpec:
    """The job for ``cfg``: entrypoint, runtime env (no secrets), submission id, metadata, uploaded files.

    Example:
        >>> spec = nbtools.launch.build(cfg)
        >>> spec.entrypoint.startswith("cd /opt/nemo-rl && python -u examples/run_grpo")
        True
    """
    backend = backend or backends.get(cfg)
    return build_for(cfg, trainer or trainers.get(cfg, backend), backend)


def build_for(cfg: Experiment, trainer: trainers.Trainer, backend: backends.Backend) -> LaunchSpec:
    """:func:`build` with the trainer and backend the caller resolved once."""
    job = trainer.job()
    env = {"env_vars": env_vars_for(cfg, trainer, backend), **job.runtime_env}
    secrets = backend.job_secrets() if job.secrets else {}
    entry = (secrets_prelude() if secrets else "") + job.command
    return LaunchSpec(
        entry, cfg.submission_id, env, metadata_for(cfg, trainer), cfg.backend, cfg.dashboard_url, job.command,
        files=job.files, secret_names=tuple(sorted(secrets)), lines=job.lines,
    )


def send(spec: LaunchSpec, cfg: Experiment):
    return send_for(spec, secret_values(cfg) if spec.secret_names else {})


def send_for(spec: LaunchSpec, secrets: dict) -> Any:
    """:func:`send` with the secrets the caller's backend delivers (``Backend.job_secrets``)."""
    from nbtools import jobs

    try:
        return jobs.attach(spec.address, spec.submission_id)
    except NotFoundError:
        pass
    renv = {k: (dict(v) if isinstance(v, dict) else v) for k, v in spec.runtime_env.items()}
    if spec.files or secrets:
        renv["working_dir"] = upload_working_dir(spec.address, spec.files, secrets)
    return jobs.submit(
        spec.address, entrypoint=spec.entrypoint, submission_id=spec.submission_id, runtime_env=renv,
        metadata=spec.metadata,
    )


def submit(
    cfg: Experiment,
    *,
    resume: bool | None = None,
    existing_steps: StepsSource = None,
    cluster_gpus: int | None = None,
    ignore_fit: bool = False,
):
    """Submit ``cfg``'s job, or re-attach to it when a job with its submission id exists on that cluster.

    A new submission is linted first and refused (``LintError`` listing each finding and its fix) when any finding
    is blocking.

    Args:
        cfg: the experiment.
        resume: allow a checkpoint_dir that already holds ``step_N`` (default ``trainer.resume``).
        existing_steps: see :func:`lint` (for gke/ray when the checkpoint dir is not visible here).
        cluster_gpus: the cluster's GPUs (default: ``cluster.total_gpus`` on gke, the dashboard's count on ray).
        ignore_fit: submit even when ``nbtools.fit`` says the config certainly does not fit in GPU memory.

    Returns:
        nbtools.jobs.Job

    Example:
        >>> job = nbtools.launch.submit(cfg)
        >>> job.id == cfg.submission_id
        True
    """
    from nbtools import jobs

    backend = backends.get(cfg)  # each registry asked once; the objects are passed down
    trainer = trainers.get(cfg, backend)
    spec = build_for(cfg, trainer, backend)
    try:
        return jobs.attach(spec.address, spec.submission_id)
    except NotFoundError:
        pass
    if cluster_gpus is None:
        cluster_gpus = backend.gpus()
    report = lint_for(cfg, trainer, backend, cluster_gpus=cluster_gpus, existing_steps=existing_steps, resume=resume,
                      ignore_fit=ignore_fit)
    if not report.ok:
        raise LintError(report.blocking, fix=Fix("apply each finding's fix (nbtools.launch.lint(cfg) shows them all), then "
                                                 "submit again", cli="apply each finding's fix (`nbtools launch "
                                                 "EXPERIMENT.yaml --lint-only` shows them all), then launch again"))
    return send_for(spec, backend.job_secrets() if spec.secret_names else {})


def follow(cfg: Experiment, job, *, timeout: float | None = None):
    """Follow ``job`` with a progress bar from its ``Step k/N`` lines (``nbtools.jobs.follow_with_progress``).

    Reaching ``timeout`` returns the current status (``RUNNING``) and leaves the job running, on every backend: a
    GRPO run can outlast any cell; call again to continue the bar where it stopped. A job that ends FAILED or
    STOPPED raises JobFailedError with its log tail.

    Example:
        >>> nbtools.launch.follow(cfg, job, timeout=1000)
        <JobStatus.SUCCEEDED: 'SUCCEEDED'>
    """
    from nbtools import jobs
    from nbtools.errors import NotReadyError

    try:
        return jobs.follow_with_progress(job, total_steps=cfg.grpo.max_num_steps, timeout=timeout)
    except NotReadyError:
        return job.status()
