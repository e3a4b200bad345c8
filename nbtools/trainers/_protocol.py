"""What every trainer implements (see ``nbtools.trainers``): the facts and verbs that differ by what runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nbtools.rewards import AdvantageRule  # the data it describes lives with the advantages

if TYPE_CHECKING:
    from nbtools.config import Experiment
    from nbtools.trainers._findings import LintReport

__all__ = ["Trainer", "TrainerJob", "CodePresent", "CodeSource", "Hardware", "Layout", "RunLayout", "OutputDirs",
           "AdvantageRule", "cluster_metadata", "cluster_env", "cluster_hardware"]

CodePresent = bool | Callable[[str], bool] | None  # whether the trainer's source is at a path on the pods

# Which trainer's files a run leaves (what the local rehearsal writes in its place, and what the readers find): the
# name of a registered :class:`RunLayout` (NeMo-RL's exp_NNN / step_N, verl's global_step_N / {step}.jsonl dumps).
Layout = str


@runtime_checkable
class RunLayout(Protocol):
    """What a trainer's runs leave and how nbtools reads it: the object the readers (metrics, checkpoints, health,
    the card) ask instead of testing a trainer's name. One per trainer folder (``LAYOUT``).

    Attributes:
        name: the layout's name (``Trainer.layout``, ``OutputDirs.layout``).
        metric_names: friendly name (``reward``, ``accuracy``, ``kl`` ...) -> candidate scalar tags, first present
            wins (``*`` globs).
        metric_prefixes: the first path components of the tags only this trainer logs (``metrics.framework_of``).
        console_log: whether its scalars are printed as console lines (``metrics.read_verl_log`` reads those).
        pod_local_roots: pod directories its runs write relative results/logs under (a gke ``wipe`` clears
            ``<root>/<experiment>`` there).
        rehearsal_writer: ``module:Class`` of the writer the CPU rehearsal leaves these files with
            (``nbtools.rehearsal.writers.Writer``), imported when a rehearsal imitates this trainer.
    """

    name: str
    metric_names: dict[str, tuple[str, ...]]
    metric_prefixes: tuple[str, ...]
    console_log: bool
    rehearsal_writer: str
    pod_local_roots: tuple[str, ...]

    def owns_checkpoints(self, checkpoint_dir: Any) -> bool:
        """Whether ``checkpoint_dir`` holds this layout's checkpoints (then its ``list_checkpoints`` and
        ``latest_checkpoint`` read it); False leaves it to ``nbtools.checkpoints``' own ``step_N`` reader."""


@dataclass(frozen=True)
class OutputDirs:
    """Where a run writes, as its jobs see the paths: the layout, and each directory that layout has."""

    layout: Layout
    log_dir: str
    checkpoint_dir: str
    tensorboard_dir: str  # NeMo-RL: log_dir (each exp_NNN has its own tensorboard/); verl: TENSORBOARD_DIR
    rollout_dir: str | None = None  # verl's trainer.rollout_data_dir ({step}.jsonl per training step)
    validation_dir: str | None = None  # verl's trainer.validation_data_dir


@dataclass(frozen=True)
class CodeSource:
    """A trainer's source the pods run from the shared storage (its image holds no checkout): a git repository at a
    ref, copied to ``code_dir`` by the provisioning plan (the steps ``<name>-fetch`` and ``<name>-source``)."""

    name: str
    repo: str
    ref: str
    code_dir: str  # as the pods see it


@dataclass(frozen=True)
class Hardware:
    """What a trainer's runs ran on and in, as a model card states it."""

    image: str
    cluster: str
    gpus: int | None  # None: no GPUs (no GPU-hours)
    example: tuple[str, int]  # a prompt for the card's loading snippet, and its max_new_tokens
    rehearsal: bool = False  # nbtools' CPU rehearsal (the card describes a miniature run and its own LR schedule)


@dataclass(frozen=True)
class TrainerJob:
    """The trainer's part of a Ray job: its command, files for the working_dir, and runtime_env additions."""

    command: str  # the command alone, as pasted into a shell on the head
    lines: tuple[str, ...] = ()  # the command split for display (head, then one override per line)
    files: dict[str, bytes] = field(default_factory=dict)  # uploaded in the job's working_dir
    runtime_env: dict[str, Any] = field(default_factory=dict)  # e.g. py_modules, excludes
    secrets: bool = True  # whether this machine's secrets travel with the job (the CPU rehearsal needs none)


@runtime_checkable
class Trainer(Protocol):
    """What runs a GRPO job: its command, environment, rules, names and facts, for one release.

    Attributes:
        name: the ``trainer.kind`` it is registered under (the rehearsal, which the local backend runs, has its own).
        release: the release it is (``v0.7.0``), or ``""`` where the release is nbtools' own.
        label: how a model card or a table names it.
        evaluator: ``module:name`` of the ``nbtools.evals`` evaluator notebook 07 runs for its runs (here on the
            held-out split, NeMo-RL's run_eval.py job, vLLM generations over the test split), imported by the evals;
            None where nbtools has no evaluation for it (the evals say what to do instead).
        metric_family: the key of its scalar names in ``trainers.METRIC_NAMES`` (its layout's name).
        layout: which trainer's files its runs leave: a :class:`RunLayout`'s name (``trainers.layout(name)``).
        citation: ``(name, BibTeX)`` a model card cites.
        cfg: the experiment it was built for (``nbtools.trainers.get(cfg)``); the verbs read it, so none takes it
            again (``check`` and ``code_source``, asked of the class before any experiment is valid, do).
    """

    name: str
    release: str
    label: str
    evaluator: str | None
    metric_family: str
    layout: Layout
    cfg: Experiment

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """Configuration problems only this trainer has: (the keys each reads, the message naming key, value and fix);
        ``config.load`` reports them with everything else."""

    def output_dirs(self) -> OutputDirs:
        """Where its runs write (log, checkpoint, TensorBoard and dump directories), as the jobs see them."""

    def job(self) -> TrainerJob:
        """The command (and files, runtime_env) of the training job."""

    def fit_inputs(self) -> tuple[dict[str, Any], list[str]] | None:
        """The GPU memory fit's inputs read from this trainer's own keys (``nbtools.fit.FitInputs`` fields, with a
        ``profile``: a :class:`FitProfile`) and notes; None where it runs on no GPU (the CPU rehearsal)."""

    def prepare_command(self) -> str | None:
        """The command of a data-preparation job run before training, or None where the trainer needs none."""

    def job_env(self) -> dict[str, str]:
        """Environment variables the trainer's job needs (never secrets; a cluster trainer: the shared HF_HOME too)."""

    def metadata(self) -> dict[str, str]:
        """Job metadata besides name/hash/backend/role (a cluster trainer: image, release, where it writes)."""

    def lint(self, report: LintReport, *, code_present: CodePresent = None,
             cluster_checks: Callable[[], None] | None = None) -> None:
        """Add the trainer's own findings (its keys, versions, source) to ``report``; a trainer whose jobs run on a
        GPU cluster first calls ``cluster_checks`` (launch's directories, GPUs, NCCL network, Ray version and memory
        fit), which the CPU rehearsal has none of."""

    @classmethod
    def code_source(cls, cfg: Experiment) -> CodeSource | None:
        """The source the provisioning plan must put on the shared storage, or None where the image holds it."""

    def trained_task(self) -> str:
        """The dataset its runs trained on (the rehearsal: its generated task, whatever ``data.dataset`` says)."""

    def hardware(self) -> Hardware:
        """The image, cluster and GPUs its runs used, and an example prompt, for the model card."""

    def ray_pinned_by(self) -> str:
        """What pins the cluster's Ray version (named in the ray-version finding)."""

    def baseline_model(self) -> str:
        """The model a run starts from, as the cluster's jobs see it."""

    def rewards(self) -> tuple[list[dict[str, Any]], str]:
        """The reward functions the run scored with (NeMo-RL's ``[{name, weight, kwargs}]``) and where they came
        from (for the model card)."""

    def advantage_rule(self) -> AdvantageRule:
        """How this trainer's runs computed advantages (``rewards.rescore`` recomputes them the same way)."""

    def rescore_mix(self) -> list[dict[str, Any]]:
        """The run's reward mix as nbtools' registered rewards (``[{name, weight, kwargs}]``), so
        ``rewards.rescore`` reproduces what the trainer scored; a NotFoundError when nbtools has no such reward."""

    def version(self) -> str:
        """The release as a card shows it."""

    def hub_tag(self) -> str:
        """The model card's tag for the trainer."""


def cluster_metadata(cfg: Experiment, own: dict[str, str]) -> dict[str, str]:
    """A cluster trainer's job metadata: the image, the trainer's own entries, then where the run writes."""
    return {"nbtools.image": cfg.images.resolved_image, **own, "nbtools.log_dir": cfg.log_dir,
            "nbtools.checkpoint_dir": cfg.checkpoint_dir}


def cluster_hardware(cfg: Experiment) -> Hardware:
    """A cluster trainer's hardware: the image, the worker nodes (and the generation nodes when not colocated), a
    MATH-style example prompt."""
    c = cfg.cluster
    machine = f" ({c.machine_type})" if c.machine_type else ""
    cluster = f"{c.worker_replicas} × {c.gpus_per_node} {c.gpu_type}{machine}, backend `{cfg.backend}`"
    if not cfg.trainer.colocated:
        cluster += f"; generation on {cfg.trainer.generation_nodes} node(s), not colocated"
    example = ("What is 12 * 13? Put the final answer in \\boxed{}.", cfg.grpo.max_new_tokens or 1024)
    return Hardware(cfg.images.resolved_image, cluster, c.total_gpus, example)


def cluster_env(cfg: Experiment, own: dict[str, str]) -> dict[str, str]:
    """A cluster trainer's job environment: the shared HF cache (``storage.hf_home``), then the trainer's own."""
    return {**({"HF_HOME": cfg.storage.hf_home} if cfg.storage.hf_home else {}), **own}
