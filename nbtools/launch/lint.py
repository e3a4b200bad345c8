"""Lint a launch before it costs GPU hours: each finding names the key, what is wrong, and the fix.

Why: the known traps of NeMo-RL on Ray clusters only show up minutes into a job (vLLM crashing on Gemma-3,
corrupted consolidated checkpoints, a silent resume from an old ``step_N``, a placement group that never fits,
artifacts on pod-local disk, an override key the release does not have). Checking them here is cheap.

Example:
    >>> report = nbtools.launch.lint(cfg)
    >>> report.ok
    True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from nbtools import backends, trainers
from nbtools._layout import step_dirs
from nbtools.config import Experiment
from nbtools.errors import Fix, NbtoolsError
from nbtools.launch._rules_fit import check_fit
from nbtools.launch._rules_reward import check_reward_contract
from nbtools.launch.runtime_env import NET_CHOICE
from nbtools.trainers import CodePresent, Finding, LintReport

__all__ = ["Finding", "LintReport", "lint", "existing_steps_in", "ray_compatibility"]

StepsSource = Iterable[int] | Callable[[str], Iterable[int]] | None


def existing_steps_in(checkpoint_dir: str | Path) -> list[int]:
    """The ``step_N`` numbers in a checkpoint dir — a local path or a URL such as the run's bucket (``tmp_step_N``
    is incomplete, not counted); [] when it does not exist yet."""
    from nbtools import storage
    from nbtools._layout import STEP_RE, VERL_STEP_RE

    if storage.is_remote(checkpoint_dir):
        if storage.info(str(checkpoint_dir)) is None:
            return []
        return sorted(int(m.group(1)) for e in storage.ls(checkpoint_dir)
                      if e.is_dir and (m := STEP_RE.match(e.name) or VERL_STEP_RE.match(e.name)))
    local = Path(checkpoint_dir).expanduser()
    verl = [int(m.group(1)) for p in (local.iterdir() if local.is_dir() else []) if p.is_dir() and (m := VERL_STEP_RE.match(p.name))]
    return sorted([n for n, _ in step_dirs(checkpoint_dir)] + verl)


def ray_compatibility(client: str, cluster: str, *, pinned_by: str = "the cluster's image") -> Finding | None:
    """The rule for a Ray client talking to a cluster of another version through the Jobs API.

    The Jobs API is HTTP/JSON on the dashboard and the driver runs on the cluster with the cluster's own Ray, so a
    different client version is fine within the same major release (nbtools uses only submit/status/logs/stop and
    a ``working_dir`` upload, all stable since Ray 2.0): a warning, because a newer client's optional request
    fields can be rejected by an older dashboard. Different major versions, or a client older than 2.0, are
    blocking. Ray Client (``ray://``) would need an exact match; nbtools never uses it.
    """
    cv, sv = _version(client), _version(cluster)
    if cv is None or sv is None or cv[:2] == sv[:2]:
        return None
    if cv[0] != sv[0] or cv[0] < 2:
        return Finding(
            "blocking", "ray-version", "images.ray_version",
            f"this notebook's Ray {client} and the cluster's Ray {cluster} are different major versions; "
            "the Jobs API is not guaranteed across them",
            f"install a matching client: pip install 'ray[default]=={cluster}'",
        )
    return Finding(
        "warning", "ray-version", "images.ray_version",
        f"this notebook's Ray {client} differs from the cluster's Ray {cluster} (pinned by {pinned_by}); the "
        "Jobs API (HTTP) works across 2.x and the driver runs on the cluster with its own Ray, but Ray Client (ray://) "
        "would not, and request fields newer than the cluster's dashboard may be rejected",
        f"nothing needed for nbtools' submit/follow/stop; for exact parity: pip install 'ray[default]=={cluster}'",
    )


def _version(v: str) -> tuple[int, ...] | None:
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    return tuple(int(x) for x in m.groups(default="0")) if m else None


def lint(
    cfg: Experiment,
    *,
    cluster_gpus: int | None = None,
    existing_steps: StepsSource = None,
    resume: bool | None = None,
    client_ray_version: str | None = None,
    ignore_fit: bool = False,
    code_present: CodePresent = None,
    reward_contract: str = "blocking",
    trainer: trainers.Trainer | None = None,
    backend: backends.Backend | None = None,
) -> LintReport:
    """Check ``cfg`` for the known launch traps; never raises for a finding (``launch.submit`` does).

    Args:
        cfg: the experiment.
        cluster_gpus: GPUs the cluster has (default: ``cluster.total_gpus`` on gke; unchecked on a plain address).
        existing_steps: ``step_N`` numbers already in checkpoint_dir, or a callable(checkpoint_dir) returning them
            (e.g. an exec on the head); default: look on the local filesystem when the dir is visible here.
        resume: allow launching into a checkpoint_dir that has steps (default ``trainer.resume``).
        client_ray_version: the Ray this notebook talks with (default: the installed ``ray.__version__``).
        ignore_fit: report a config that certainly does not fit in GPU memory as a warning, not a blocking finding.
        code_present: verl: whether its source is at ``trainer.code_dir`` on the pods (a bool, or a callable(path));
            default: look when the dir is visible here, else the provisioning state of this machine.
        reward_contract: the reward functions must score what the prompt asks for (``nbtools.health``):
            "blocking" (default), "warning" or "off".
        trainer / backend: ``trainers.get(cfg)`` / ``backends.get(cfg)`` where the caller has them already.

    Example:
        >>> nbtools.launch.lint(cfg, existing_steps=[10, 20], resume=True).warnings[0].rule
        'existing-checkpoints'
    """
    backend = backend or backends.get(cfg)
    return lint_for(cfg, trainer or trainers.get(cfg, backend), backend, cluster_gpus=cluster_gpus,
                    existing_steps=existing_steps, resume=resume, client_ray_version=client_ray_version,
                    ignore_fit=ignore_fit, code_present=code_present, reward_contract=reward_contract)


def lint_for(cfg: Experiment, trainer: trainers.Trainer, backend: backends.Backend, *, cluster_gpus: int | None = None,
             existing_steps: StepsSource = None, resume: bool | None = None, client_ray_version: str | None = None,
             ignore_fit: bool = False, code_present: CodePresent = None, reward_contract: str = "blocking") -> LintReport:
    """:func:`lint` with the trainer and backend the caller resolved once."""
    r = LintReport()
    resume = cfg.trainer.resume if resume is None else resume
    _checkpoints(cfg, r, existing_steps, resume)
    _secrets(cfg, r, backend)
    check_reward_contract(cfg, r, severity=reward_contract, trainer=trainer)

    def cluster_checks() -> None:  # what every job on a GPU cluster gets; the trainer calls it (the rehearsal does not)
        nonlocal client_ray_version
        _dirs(cfg, r)
        _gpus(cfg, r, cluster_gpus, backend)
        _nccl_net(cfg, r)
        r.checked.append("ray-version")
        if client_ray_version is None:
            import ray

            client_ray_version = ray.__version__
        f = ray_compatibility(client_ray_version, cfg.images.resolved_ray_version, pinned_by=trainer.ray_pinned_by())
        if f:
            r.findings.append(f)
        check_fit(cfg, r, ignore=ignore_fit, trainer=trainer)

    trainer.lint(r, code_present=code_present, cluster_checks=cluster_checks)
    return r


def _checkpoints(cfg: Experiment, r: LintReport, source: StepsSource, resume: bool) -> None:
    r.checked.append("existing-checkpoints")
    ckpt = cfg.checkpoint_dir
    if callable(source):
        steps = sorted(source(ckpt))
    elif source is not None:
        steps = sorted(source)
    else:
        try:  # where the checkpoints live: the local dir, or the bucket the pods write to
            steps = existing_steps_in(cfg.checkpoints_url)
        except NbtoolsError as e:
            r.findings.append(Finding(
                "warning", "existing-checkpoints", "checkpointing.checkpoint_dir",
                f"{ckpt} cannot be listed from here ({str(e).splitlines()[0]}), so an old step_N (which NeMo-RL "
                "silently resumes from) was not checked",
                "put checkpoint_dir on the shared storage (storage.mount_path) or pass existing_steps=<list of N>",
            ))
            return
    if not steps:
        return
    where = f"{ckpt} already holds step_{steps[-1]}" + (f" (and {len(steps) - 1} more)" if len(steps) > 1 else "")
    if resume:
        r.findings.append(Finding(
            "warning", "existing-checkpoints", "checkpointing.checkpoint_dir",
            f"{where}; the run will resume from step_{steps[-1]} (resuming was asked for)",
            "nothing, if resuming is what you want; otherwise choose a fresh checkpoint_dir",
        ))
        return
    r.findings.append(Finding(
        "blocking", "existing-checkpoints", "checkpointing.checkpoint_dir",
        f"{where}; NeMo-RL would silently resume from it instead of starting a fresh run",
        Fix("pass resume=True (or set `trainer.resume: true`) to continue that run, or set a fresh "
            "`checkpointing.checkpoint_dir` (e.g. add the date to the experiment name)",
            cli="pass --resume (or set `trainer.resume: true`) to continue that run, or set a fresh "
                "`checkpointing.checkpoint_dir` (e.g. add the date to the experiment name)"),
    ))


def _dirs(cfg: Experiment, r: LintReport) -> None:
    r.checked.append("absolute-dirs")
    mount = cfg.storage.mount_path.rstrip("/") + "/"
    for key, configured in (("logging.log_dir", cfg.logging.log_dir), ("checkpointing.checkpoint_dir", cfg.checkpointing.checkpoint_dir)):
        leaf = key.split(".")[1]
        example = f"{mount}nemo-rl/{cfg.name}/{'logs' if leaf == 'log_dir' else 'checkpoints'}"
        if not configured:
            r.findings.append(Finding(
                "blocking", "absolute-dirs", key,
                f"not set for backend {cfg.backend!r}; NeMo-RL's default is relative and lands on pod-local disk",
                f"set `{key}: {example}`",
            ))
        elif not configured.startswith("/"):
            r.findings.append(Finding(
                "blocking", "absolute-dirs", key,
                f"{configured!r} is relative: it resolves against /opt/nemo-rl on each pod (pod-local disk, lost with the pod, "
                "shards scattered over workers)",
                f"use an absolute path on the shared mount, e.g. `{key}: {example}`",
            ))
        elif cfg.storage.kind != "none" and not (configured.rstrip("/") + "/").startswith(mount):
            r.findings.append(Finding(
                "warning", "absolute-dirs", key,
                f"{configured!r} is not under the shared mount {cfg.storage.mount_path}; other pods and this notebook "
                "may not see it",
                f"e.g. `{key}: {example}`",
            ))


def _gpus(cfg: Experiment, r: LintReport, cluster_gpus: int | None, backend: backends.Backend) -> None:
    r.checked.append("gpus")
    nodes, per = cfg.cluster.worker_replicas, cfg.cluster.gpus_per_node
    t = cfg.trainer
    requested = nodes * per
    if not t.colocated:
        if t.generation_nodes is not None:
            if t.generation_nodes >= nodes:
                r.findings.append(Finding(
                    "blocking", "gpus", "trainer.generation_nodes",
                    f"{t.generation_nodes} generation node(s) of {nodes} leaves no node for training",
                    f"use at most {nodes - 1} generation node(s) or raise `cluster.worker_replicas`",
                ))
        elif t.generation_gpus_per_node is not None:
            if nodes != 1:
                r.findings.append(Finding(
                    "blocking", "gpus", "trainer.generation_gpus_per_node",
                    f"generation_gpus_per_node only applies to single-node runs, but the run has {nodes} nodes",
                    "set `trainer.generation_nodes` (whole nodes for vLLM) instead",
                ))
            elif t.generation_gpus_per_node >= per:
                r.findings.append(Finding(
                    "blocking", "gpus", "trainer.generation_gpus_per_node",
                    f"{t.generation_gpus_per_node} generation GPU(s) of {per} leaves none for training",
                    f"use at most {per - 1}",
                ))
    if cluster_gpus is None:
        cluster_gpus = backend.gpus()
    if cluster_gpus is None:
        r.findings.append(Finding(
            "warning", "gpus", "cluster.worker_replicas",
            f"the run asks for {requested} GPUs ({nodes} x {per}); the cluster's GPU count was not checked",
            Fix("pass cluster_gpus=nbtools.backends.get(cfg).resources().gpus",
                cli="bring the cluster up first (`nbtools up EXPERIMENT.yaml --apply`), then lint again"),
        ))
    elif requested > cluster_gpus:
        r.findings.append(Finding(
            "blocking", "gpus", "cluster.worker_replicas",
            f"the run asks for {requested} GPUs ({nodes} nodes x {per}, training + non-colocated generation) but the "
            f"cluster has {cluster_gpus}; the placement group would wait forever",
            f"set `cluster.worker_replicas: {max(1, cluster_gpus // per)}` or add nodes to the cluster",
        ))
    elif requested < cluster_gpus:
        r.findings.append(Finding(
            "warning", "gpus", "cluster.worker_replicas",
            f"the run uses {requested} of the cluster's {cluster_gpus} GPUs; the rest stay idle",
            f"set `cluster.worker_replicas: {cluster_gpus // per}` to use them all",
        ))


def _secrets(cfg: Experiment, r: LintReport, backend: backends.Backend) -> None:
    """Secrets are named, never stored: warn (or block, when the run needs it) where a named env var is unset.

    On gke the env var only matters when the Kubernetes Secret is created (``cluster.up`` refuses then, naming it);
    a launch uses the Secret already in the cluster, so an unset variable is not reported here.
    """
    r.checked.append("secrets")
    for name, needed in (("hf_token", False), ("wandb_api_key", cfg.logging.wandb)):
        ref = getattr(cfg.secrets, name)
        env_name = ref.env if ref is not None and ref.env else ("HF_TOKEN" if name == "hf_token" else "WANDB_API_KEY")
        unset = ref is not None and bool(ref.env) and ref.value() is None
        delivery = backend.secrets_from
        if delivery == "kubernetes":
            if (ref is None or not ref.k8s_secret) and (needed or name == "hf_token"):
                r.findings.append(Finding(
                    "blocking" if needed else "warning", "secrets", f"secrets.{name}",
                    f"no Kubernetes Secret named, so the pods have no {env_name}",
                    f"set `secrets.{name}: {{env: {env_name}, k8s_secret: <name>, key: <key>}}` (notebook 01 creates it)",
                ))
        elif delivery == "none":
            if unset:
                r.findings.append(Finding(
                    "warning", "secrets", f"secrets.{name}.env",
                    f"${env_name} is referenced but not set in this environment (the local rehearsal does not need it; "
                    "a job on ray would run without it, and on gke the Secret could not be created from it)",
                    f"export {env_name}=... before starting Jupyter / the CLI, or remove `secrets.{name}`",
                ))
        elif ref is None or not ref.env or ref.value() is None:
            if needed or ref is not None:
                r.findings.append(Finding(
                    "blocking" if needed else "warning", "secrets", f"secrets.{name}",
                    f"{env_name} is not set in this notebook's environment, so the job will not have it"
                    + (" (W&B logging is on)" if needed else " (gated models such as Gemma and Llama fail to download)"),
                    f"export {env_name} before starting Jupyter and set `secrets.{name}: {{env: {env_name}}}`",
                ))


def _nccl_net(cfg: Experiment, r: LintReport) -> None:
    """NCCL_NET and NCCL_NET_PLUGIN both choose NCCL's network (``runtime_env.NET_CHOICE``): set together they say
    one thing twice or contradict each other. gIB's transport registers as the network ``gIB`` ("NET/gIB :
    Initializing gIB"), so any other NCCL_NET next to a gIB plugin library makes NCCL pass that library by."""
    r.checked.append("nccl-net")
    env = cfg.trainer.env_vars
    if not all(k in env for k in NET_CHOICE):
        return
    net, plugin = env["NCCL_NET"], env["NCCL_NET_PLUGIN"]
    gib = "/gib/" in plugin or plugin.lower() == "gib"
    fix = (f"remove `trainer.env_vars.NCCL_NET` and keep `NCCL_NET_PLUGIN: {plugin}` (tutorial 002's way), or remove "
           "`NCCL_NET_PLUGIN` and let nbtools set GKE's NCCL_NET=gIB")
    if gib and net != "gIB":
        r.findings.append(Finding(
            "blocking", "nccl-net", "trainer.env_vars.NCCL_NET",
            f"NCCL_NET={net} asks NCCL for a network that the gIB library in NCCL_NET_PLUGIN ({plugin}) does not "
            "provide (it registers as gIB): NCCL would fail to start or run over another transport", fix))
    else:
        r.findings.append(Finding(
            "warning", "nccl-net", "trainer.env_vars.NCCL_NET",
            f"NCCL_NET={net} and NCCL_NET_PLUGIN={plugin} both choose NCCL's network; a job sets one (GKE's "
            "set_nccl_env.sh sets NCCL_NET=gIB, tutorial 002 only NCCL_NET_PLUGIN)", fix))
