"""The experiment's frozen dataclass tree: one section per concern, plus the values derived from it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, StrictBool, StrictFloat, StrictInt, with_config

import nbtools._paths as _paths
from nbtools._escape import html as _h
from nbtools.config._contrib import CONTRIBUTIONS
from nbtools.config._tables import (  # noqa: F401 - re-exported for nbtools.config
    DEFAULT_TRAINER,
    GPU_DRIVER_VERSIONS,
    GPU_TYPES,
    NCCL_INSTALLER_REF,
    NEMO_RL_VERSIONS,
    VERL_REF,
    VERL_REPO,
)
from nbtools.errors import NbtoolsError

Backend = Literal["local", "gke", "ray"]

# How config.load validates each section (pydantic, nbtools.config._validate): an unknown key is a problem, a string
# field takes a number (`head_cpu: 8`); the Strict* field types refuse `"5"` or `true` for a number and `yes` for a bool
_STRICTNESS = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Secret:
    """A secret value read from the environment at use time; never shown in any repr or display."""

    __slots__ = ("_value", "_name")

    def __init__(self, value: str, name: str = "secret"):
        self._value = value
        self._name = name

    def reveal(self) -> str:
        """The raw value, for the one place that must hand it to a client (e.g. a Kubernetes Secret body)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self._name}=****)"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return f"<code>{_h(repr(self))}</code>"

    def __reduce__(self):
        raise TypeError("nbtools.config.Secret cannot be pickled or serialized; pass its name, not its value")


# ----------------------------------------------------------------------------------------------------------
# The dataclass tree. Each section documents its keys in the field comments; YAML keys are the field names.
# ----------------------------------------------------------------------------------------------------------


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class GcpConfig:
    project: str = ""  # GCP project id (required for backend gke)
    region: str = "us-central1"
    zone: str = "us-central1-b"
    project_number: str = ""  # for the Workload Identity principal; empty = looked up with `gcloud projects describe`
    service_account: str | None = None  # optional GSA email the KSA impersonates (else direct WI principal binding)


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class ClusterConfig:
    name: str = "nbtools-ray"  # GKE cluster and RayCluster name
    namespace: str = "default"
    mode: Literal["standard", "autopilot"] = "standard"
    # backend gke: a GPU nbtools provisions (GPU_TYPES: nvidia-b200, nvidia-h200-141gb); a Ray cluster nbtools did not
    # make (backend ray or local): any NVIDIA GPU the fit check knows the memory of (a100-80, a100-40, h100, l4, ...,
    # or its memory, e.g. 96gib): nbtools.fit.GPUS
    gpu_type: str = "nvidia-b200"
    worker_replicas: StrictInt = 1
    gpus_per_node: StrictInt = 8
    provisioning: Literal["spot", "reservation", "on-demand"] = "spot"
    reservation: str | None = None  # required when provisioning == "reservation"
    kuberay: Literal["addon", "helm"] = "addon"  # GKE Ray operator add-on, or KubeRay via Helm
    kuberay_version: str = "1.7.0"
    head_cpu: str = "8"
    head_memory: str = "32Gi"
    worker_cpu: str = "200"
    worker_memory: str = "1800Gi"
    shm_size: str = "240Gi"
    network_prefix: str = ""  # prefix for the gVNIC / RDMA VPCs; defaults to the cluster name
    gke_version: str | None = None  # --cluster-version (B200 needs >= 1.32.2-gke.1422000); None = channel default
    head_machine_type: str = "e2-standard-16"  # default-pool machine (Standard): must fit head_cpu / head_memory
    node_pool: str = "gpu-pool"  # the GPU node pool (Standard)
    ksa: str = "nbtools-ksa"  # Kubernetes ServiceAccount of the Ray pods (Workload Identity to the bucket)
    gpu_driver_version: Literal["latest", "default", "disabled"] = "latest"  # GKE-installed NVIDIA driver (Standard)
    gvnic_mtu: StrictInt = 8896  # MTU of the gVNIC VPC (gcloud's default is 1460; A4/A3 Ultra guidance: 8896)
    nccl_installer_ref: str = NCCL_INSTALLER_REF  # container-engine-accelerators commit/tag of the gIB installer

    @property
    def machine_type(self) -> str | None:
        """The GCE machine type of a GPU nbtools provisions on GKE; None for one on a cluster it did not make."""
        return GPU_TYPES.get(self.gpu_type, {}).get("machine_type")

    @property
    def nccl_tuner_config(self) -> str | None:
        return GPU_TYPES.get(self.gpu_type, {}).get("nccl_tuner_config")

    @property
    def total_gpus(self) -> int:
        return self.worker_replicas * self.gpus_per_node

    @property
    def networks(self) -> str:
        return self.network_prefix or self.name


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class LustreConfig:
    instance: str = ""  # Managed Lustre instance name
    ip: str = ""
    filesystem: str = "lustrefs"
    capacity: str = "18000Gi"


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class StorageConfig:
    kind: Literal["gcsfuse", "lustre", "none"] = "gcsfuse"
    bucket: str | None = None  # GCS bucket (no gs:// prefix); required for gcsfuse on gke
    mount_path: str = "/data"  # where the cluster's pods see the shared storage
    url: str | None = None  # backend ray: the URL this machine reads mount_path at (gs://…, s3://…); gke: gs://<bucket>
    capacity: str = "1Ti"
    lustre: LustreConfig | None = None

    @property
    def hf_home(self) -> str | None:
        """HF_HOME on the shared mount (models download once per cluster), or None without shared storage."""
        return None if self.kind == "none" else f"{self.mount_path.rstrip('/')}/huggingface_cache"


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class ImagesConfig:
    nemo_rl_version: Literal["v0.5.0", "v0.7.0"] = "v0.7.0"
    image: str | None = None  # defaults to nvcr.io/nvidia/nemo-rl:<nemo_rl_version>
    ray_version: str | None = None  # defaults to the Ray pinned by that NeMo-RL release

    @property
    def resolved_image(self) -> str:
        return self.image or NEMO_RL_VERSIONS[self.nemo_rl_version]["image"]

    @property
    def resolved_ray_version(self) -> str:
        return self.ray_version or NEMO_RL_VERSIONS[self.nemo_rl_version]["ray"]


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class TrainerConfig:
    kind: str = DEFAULT_TRAINER  # a trainer nbtools.trainers registers (config.load names the allowed ones)
    recipe: str | None = None  # NeMo-RL config yaml relative to /opt/nemo-rl (or verl: unused)
    colocated: StrictBool = True  # generation shares the training GPUs
    generation_nodes: StrictInt | None = None  # non-colocated: nodes given to vLLM
    generation_gpus_per_node: StrictInt | None = None
    vllm_cfg: dict[str, Any] = field(default_factory=dict)
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # extra Hydra overrides, NeMo-RL's own key=value form
    resume: StrictBool = False  # allow launching into a checkpoint_dir that already has step_N
    code_dir: str | None = None  # trainer checkout on the pods: NeMo-RL /opt/nemo-rl (image), verl <mount>/verl
    python: str | None = None  # interpreter on the pods: NeMo-RL `python` (image venv on PATH), verl `python3`
    env_vars: dict[str, str] = field(default_factory=dict)  # extra job env vars (never secrets: use `secrets:`)
    verl_repo: str = VERL_REPO  # verl: the repository the provisioning plan copies to code_dir on the bucket
    verl_ref: str = VERL_REF  # verl: its release tag (git clone --branch), pinned
    reward_functions: list[dict[str, Any]] = field(default_factory=list)  # NeMo-RL: score with this nbtools mix
    reward_module: str | None = None  # NeMo-RL: .py file / package registering custom rewards (shipped in py_modules)


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class ModelConfig:
    name: str = "Qwen/Qwen2.5-1.5B"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    max_total_sequence_length: StrictInt = 1024
    tensor_parallel_size: StrictInt = 1


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class DataConfig:
    dataset: str = "OpenMathInstruct-2"
    validation: str | None = None
    prompt_file: str | None = None
    data_dir: str | None = None  # verl: parquet dir on the shared mount (default <mount>/<dataset>, e.g. /data/gsm8k)


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class GrpoConfig:
    num_prompts_per_step: StrictInt = 32
    num_generations_per_prompt: StrictInt = 16
    max_num_steps: StrictInt = 100
    val_period: StrictInt = 10
    val_at_start: StrictBool = False
    max_val_samples: StrictInt = 256
    seed: StrictInt = 42
    use_leave_one_out_baseline: StrictBool = True
    normalize_rewards: StrictBool = True
    kl_penalty: StrictFloat = 0.01
    learning_rate: StrictFloat = 5.0e-6
    temperature: StrictFloat = 1.0
    max_new_tokens: StrictInt | None = None


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class CheckpointingConfig:
    enabled: StrictBool = True
    checkpoint_dir: str = ""  # absolute on the shared mount for gke/ray; defaults under runs_dir for local
    save_period: StrictInt = 10
    keep_top_k: StrictInt = 3
    metric_name: str | None = "val:accuracy"
    higher_is_better: StrictBool = True
    dtensor_v2: StrictBool = True  # False = DTensor v1 layout (policy/weights/.metadata, keys prefixed "model.")
    model_save_format: Literal["safetensors", "torch_save"] | None = "safetensors"
    save_consolidated: StrictBool = False
    save_optimizer: StrictBool = True


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class LoggingConfig:
    log_dir: str = ""  # absolute on the shared mount for gke/ray; defaults under runs_dir for local
    tensorboard: StrictBool = True
    wandb: StrictBool = False
    wandb_project: str | None = None


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class SecretRef:
    """Where a secret comes from: an env var in the caller, and/or a Kubernetes Secret on the pods."""

    env: str | None = None
    k8s_secret: str | None = None
    key: str | None = None

    def value(self) -> Secret | None:
        """Read the env var now; None when unset. The value is wrapped so it never prints."""
        if self.env and os.environ.get(self.env):
            return Secret(os.environ[self.env], self.env)
        return None


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class SecretsConfig:
    hf_token: SecretRef | None = None
    wandb_api_key: SecretRef | None = None


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class RayConfig:
    address: str | None = None  # backend "ray": dashboard URL, e.g. http://ray-head.example:8265
    dashboard_port: StrictInt = 8265  # local head dashboard / gke port-forward local port
    port: StrictInt = 6379  # local head GCS port
    num_cpus: StrictInt | None = None  # local head CPUs (default: all)


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class LocalConfig:
    runs_dir: str = "../runs"  # relative to this file; NBTOOLS_RUNS_DIR overrides it


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class FaultConfig:
    """A fault the rehearsal injects, so stall detection and the verdict are tested on real processes and stacks.

    ``hang``: the rank blocks forever in ``phase`` (the others wait for it in their next collective); ``exit``: the
    rank process aborts there (SIGABRT, as a C++ assert in NCCL or CUDA does; faulthandler prints its Python stack);
    ``oom``: the rank raises torch's ``OutOfMemoryError`` there; ``slow``: the rank sleeps ``seconds`` in ``phase``
    at step ``step`` and every step after it (a straggler).
    """

    kind: Literal["hang", "exit", "oom", "slow"]
    rank: StrictInt = 0
    step: StrictInt = 1
    phase: Literal["generation", "train", "refit", "checkpoint"] = "train"
    seconds: StrictFloat = 20.0  # slow: the delay per step


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class StallConfig:
    """When a running job counts as stalled: no new step for ``k`` x its median step time, and at least ``floor_s``."""

    k: StrictFloat = 5.0
    floor_s: StrictFloat = 300.0  # a minimum, so a job whose first steps were fast is not called stalled at a slow one
    startup_s: StrictFloat = 1800.0  # before the first step: model loading, engine start-up and warm-up may take this long


@with_config(_STRICTNESS)
@dataclass(frozen=True)
class RehearsalConfig:
    """The miniature GRPO run of the local backend (see nbtools.rehearsal)."""

    task: Literal["max3"] = "max3"
    num_train: StrictInt = 800
    num_test: StrictInt = 200
    ranks: StrictInt = 2
    hidden_size: StrictInt = 64
    num_layers: StrictInt = 2
    num_heads: StrictInt = 2  # head size 32: the smallest vLLM's CPU attention takes (a merged model must load in vLLM)
    intermediate_size: StrictInt = 256
    warmup_steps: StrictInt = 150
    warmup_lr: StrictFloat = 3.0e-3
    max_new_tokens: StrictInt = 12
    ratio_clip: StrictFloat = 0.2
    lr_warmup_steps: StrictInt = 100  # NeMo-RL-style LinearLR warmup over this many GRPO steps
    lr_warmup_start_factor: StrictFloat = 0.1  # LinearLR's start_factor (NeMo-RL's configs: 0.1); torch needs 0 < f <= 1
    lr_decay: Literal["constant", "cosine"] = "constant"  # after warmup: ConstantLR, or cosine to lr_min_ratio·lr at max_num_steps
    lr_min_ratio: StrictFloat = 0.1  # the cosine's floor, as a fraction of grpo.learning_rate
    tie_word_embeddings: StrictBool = True  # tiny Llama: share the input embedding and lm_head
    warmup_think: Literal["copy", "running_max"] = "running_max"  # warm-start scratchpad (answers stay random)
    adam_betas: list[StrictFloat] = field(default_factory=lambda: [0.9, 0.99])
    # how a response writes its answer: "<answer> X </answer>" (NeMo-RL's math env), or GSM8K's "#### X" (the same
    # tokens; the form verl's gsm8k rule reads, for a stand-in scoring as verl does)
    answer_format: Literal["tags", "gsm8k"] = "tags"
    reward_functions: list[dict[str, Any]] = field(
        default_factory=lambda: [{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}]
    )
    faults: list[FaultConfig] = field(default_factory=list)  # injected faults (tests of stall detection), none by default


_PLACES = "_nbtools_backend"  # where an Experiment keeps the backend it built (Experiment._backend)


@_paths.tidy_reprs
@with_config(_STRICTNESS)
@dataclass(frozen=True)
class Experiment:
    """The whole experiment: cluster + trainer + run. Load with :func:`load`."""

    name: str
    backend: Backend = "local"
    gcp: GcpConfig = field(default_factory=GcpConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    images: ImagesConfig = field(default_factory=ImagesConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    checkpointing: CheckpointingConfig = field(default_factory=CheckpointingConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    secrets: SecretsConfig = field(default_factory=SecretsConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    rehearsal: RehearsalConfig = field(default_factory=RehearsalConfig)
    stall: StallConfig = field(default_factory=StallConfig)
    source: str | None = field(default=None, compare=False)  # the YAML file it came from (not part of the hash)

    # -- derived ------------------------------------------------------------------------------------------
    @property
    def runs_dir(self) -> Path:
        """Where local artifacts go: NBTOOLS_RUNS_DIR, else local.runs_dir relative to the config file."""
        env = os.environ.get("NBTOOLS_RUNS_DIR")
        runs = Path(env).expanduser().resolve() if env else _resolve_path(self.local.runs_dir, self.source)
        _paths.remember_runs_dir(runs)  # outputs show paths under it as <runs_dir>/...
        return runs

    @property
    def run_dir(self) -> Path:
        """This experiment's local directory (``runs_dir/<name>``)."""
        return self.runs_dir / self.name

    @property
    def log_dir(self) -> str:
        """NeMo-RL ``logger.log_dir`` as the cluster's jobs see it (the backend decides: ``run_dir/logs`` locally)."""
        return self._backend().log_dir

    @property
    def checkpoint_dir(self) -> str:
        """NeMo-RL ``checkpointing.checkpoint_dir`` as the cluster's jobs see it (``run_dir/checkpoints`` locally)."""
        return self._backend().checkpoint_dir

    @property
    def dashboard_url(self) -> str:
        """The Ray dashboard the Jobs API talks to (local head, port-forward, or the given address)."""
        return self._backend().dashboard_url

    @property
    def logs_url(self) -> str:
        """Where this machine reads ``log_dir``: a local path, or ``gs://…`` when the pods write to a bucket."""
        b = self._backend()
        return _paths.Url(b.storage.url(b.log_dir))

    @property
    def checkpoints_url(self) -> str:
        """Where this machine reads ``checkpoint_dir`` (a local path, or ``gs://…``)."""
        b = self._backend()
        return _paths.Url(b.storage.url(b.checkpoint_dir))

    def url(self, cluster_path: str) -> str:
        """Where this machine reads a path the cluster's jobs write (e.g. an eval's ``save_path``)."""
        return _paths.Url(self._backend().storage.url(cluster_path))

    def runs_on(self):
        """The backend this experiment's jobs run on (``nbtools.backends.get(self)``, contributed; see ``_contrib``),
        for the registries beside it that must ask it without importing it (``trainers.get``: what the jobs run)."""
        return self._backend()

    def _backend(self):
        """The backend that derives where things are (contributed by ``nbtools.backends``; see ``_contrib``), built
        once per experiment: the derived paths, ``runs_on()`` and ``nbtools.backends.get(cfg)`` all ask that one
        object (a launch once built it about sixty times, once per ``cfg.log_dir``-like read)."""
        built = self.__dict__.get(_PLACES)
        if built is None:
            if CONTRIBUTIONS.place is None:
                raise NbtoolsError("no backend registry is wired into nbtools.config, so a run's places are unknown",
                                   fix="import the nbtools package (`import nbtools`), which wires it in")
            built = self.__dict__[_PLACES] = CONTRIBUTIONS.place(self)  # the config is frozen: its fields never change
        return built

    def __getstate__(self) -> dict[str, Any]:
        """A copy or a pickle leaves the built backend behind (it may hold a client); the copy builds its own."""
        return {k: v for k, v in self.__dict__.items() if k != _PLACES}

    def config_hash(self, length: int = 10) -> str:
        """Stable hash of everything that defines the run (not the backend-independent source path)."""
        blob = json.dumps(to_dict(self), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:length]

    @property
    def submission_id(self) -> str:
        """Ray job submission id: re-running a launch with the same config re-attaches instead of starting twice."""
        return f"{self.name}-{self.config_hash()}"

    def replace(self, **changes: Any) -> Experiment:
        """A copy with dotted-key changes, validated again: ``cfg.replace(**{"grpo.max_num_steps": 10})``."""
        data = to_dict(self)
        for key, value in changes.items():
            _set_dotted(data, key, value)
        return CONTRIBUTIONS.validate(data, source=self.source)  # the loader (config.from_dict) validates again

    def _repr_markdown_(self) -> str:
        rows = [
            ("name", self.name),
            ("backend", self.backend),
            *(row for rows in CONTRIBUTIONS.rows.values() for row in rows(self)),
            ("model", self.model.name),
            ("dataset", self.data.dataset),
            ("GRPO", f"{self.grpo.num_prompts_per_step} prompts x {self.grpo.num_generations_per_prompt} generations, {self.grpo.max_num_steps} steps"),
            ("logs", self.logs_url),
            ("checkpoints", self.checkpoints_url),
        ]
        body = "\n".join(f"| {k} | `{v}` |" for k, v in rows)
        return f"**Experiment `{self.name}`** (hash `{self.config_hash()}`)\n\n| key | value |\n|---|---|\n{body}"


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain data (YAML-ready) for a config or any section of it; drops the source path."""
    d = dataclasses.asdict(cfg)
    d.pop("source", None)
    return d


def _resolve_path(value: str, source: str | None) -> Path:
    p = Path(value).expanduser()
    if not p.is_absolute():
        base = Path(source).parent if source else Path.cwd()
        p = base / p
    return p.resolve()


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cur = data
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = value
