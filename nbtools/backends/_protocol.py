"""The verbs every backend implements, with one return type each (see ``nbtools.backends``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from nbtools.backends._types import ClusterHandle, ClusterResources, ClusterStatus, Preview, Teardown
    from nbtools.config import Experiment, Secret
    from nbtools.gke._plan import Plan
    from nbtools.storage import RunStorage
    from nbtools.trainers import Trainer

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    """A place where Ray runs the experiment's jobs, and where the run's files live.

    Attributes:
        name: the registry name (``local`` / ``gke`` / ``ray``).
        cfg: the experiment it was built from.
        secrets_from: where a job's secrets come from: ``kubernetes`` (Secrets the pods read), ``this-machine``
            (env vars here, delivered in the job's working_dir) or ``none`` (the job needs none).
        provisions: whether ``provision_plan()`` is applied on this backend (gke), so its steps (e.g. copying verl to
            the shared storage) can be relied on; elsewhere the plan is only shown, or empty.
        first_notebook: the notebook a run on this backend starts from (``01_provision_gke``: provision first), named
            where a recipe or a message says what to run next.
        unread_sections: the experiment's sections a run on this backend never reads (a model card's
            ``experiment.yaml`` leaves them out or marks them).
    """

    name: str
    cfg: Experiment
    secrets_from: str
    provisions: bool
    first_notebook: str
    unread_sections: tuple[str, ...]

    def job_trainer(self, trainer: Trainer) -> Trainer:
        """What this backend's jobs run for ``trainer`` (``trainer.kind`` at its release): itself on a cluster; the
        CPU rehearsal that writes its files where there are no GPUs (local). ``nbtools.trainers.get`` asks here."""

    @property
    def dashboard_url(self) -> str:
        """The Ray dashboard / Jobs API this machine talks to (local head, port-forward, or the address)."""

    @property
    def python(self) -> str:
        """The interpreter the cluster's jobs run (``python -m nbtools…`` for jobs that carry nbtools)."""

    @property
    def log_dir(self) -> str:
        """NeMo-RL's ``logger.log_dir`` as the cluster's jobs see it."""

    @property
    def checkpoint_dir(self) -> str:
        """NeMo-RL's ``checkpointing.checkpoint_dir`` as the cluster's jobs see it."""

    @property
    def storage(self) -> RunStorage:
        """How this machine reads what the jobs write (``storage.url(cluster_path)``)."""

    def up(self, *, timeout: float | None = None, progress: bool = True) -> ClusterHandle:
        """Start the cluster, or re-attach to it; waits until its Jobs API answers."""

    def reattach(self) -> ClusterHandle | None:
        """The running cluster's handle, re-attached without starting anything; None when nothing runs."""

    def down(self, *, timeout: float = 30) -> Teardown:
        """Stop what nbtools started for this experiment; never anything else."""

    def preview(self, verb: Literal["up", "down"]) -> Preview:
        """What ``up``/``down`` would do, without doing it (the CLI's dry run)."""

    def status(self) -> ClusterStatus:
        """Whether the cluster runs and answers, without starting anything."""

    def resources(self, *, timeout: float = 10) -> ClusterResources:
        """Nodes, CPUs, GPUs and memory, like ``ray status``."""

    def gpus(self) -> int | None:
        """The GPUs jobs can use (None where no GPU count applies, e.g. the CPU rehearsal)."""

    def events(self, *, since: float | None = None, until: float | None = None, limit: int = 50) -> list[str]:
        """Infrastructure events of the cluster's machines between ``since`` and ``until`` (Unix seconds; a job's
        run): Kubernetes events of its pods, deleted ones included, and of the nodes (spot preemption, node
        shutdown, OOM kills), oldest first; empty where the backend has none to ask (what ``launch.diagnose``
        weighs besides the job's log)."""

    def pod_states(self) -> list[Any]:
        """The cluster's pods as their status describes them (``nbtools.kube.PodState``: phase, eviction,
        restarts, conditions; a stall verdict names an evicted worker or a restarted head from them); empty where
        the backend has no pods."""

    def describe(self) -> list[tuple[str, str]]:
        """Rows that say where this experiment runs (shown with the config)."""

    def job_env(self) -> dict[str, str]:
        """Environment variables every job on this cluster needs (never secrets)."""

    def job_secrets(self) -> dict[str, Secret]:
        """Secrets a job must receive from this machine (empty where the cluster holds them itself)."""

    def slow_mount(self, path: str) -> bool:
        """Whether ``path`` (as the pods see it) is on a mounted object store (GKE's gcsfuse), where loading a model
        straight from it is slow: the eval jobs copy such a model to the node's local disk first."""

    def wipe(self, *, confirm: str) -> Teardown:
        """Delete this experiment's results where the cluster keeps them; ``confirm`` must equal the name (empty:
        nothing is deleted, and the Teardown says so)."""

    def provision_plan(self) -> Plan:
        """The infrastructure plan for this experiment (GKE's steps; shown, not applied, elsewhere)."""

    def destroy_plan(self, *, delete_bucket: str | None = None) -> Plan:
        """The teardown of what :meth:`provision_plan` creates, compute first and data last (empty where nothing was
        provisioned); ``delete_bucket`` names the bucket to delete with its contents."""

    @classmethod
    def check(cls, cfg: Experiment) -> list[tuple[tuple[str, ...], str]]:
        """Configuration problems specific to this backend: (the keys each reads, the message naming key, value
        and fix); ``config.load`` reports them with everything else."""
