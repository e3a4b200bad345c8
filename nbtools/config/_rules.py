"""Cross-field rules of the experiment config: what no single field's type can say.

Each rule names the keys it reads; a rule that reads a key whose value failed its type check (and so holds the
default) is skipped, because its verdict would be about the default rather than about the user's file.
"""

from __future__ import annotations

import dataclasses
import math
import re

from nbtools.config._contrib import CONTRIBUTIONS
from nbtools.config._sections import _ENV_NAME, _K8S_NAME, GPU_TYPES, Experiment
from nbtools.config._tables import gke_version_too_old
from nbtools.config._tokens import redact, token_kind
from nbtools.config._validate import Problems, _part, _show

SECRET_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")  # never in trainer.env_vars



def _semantic_checks(cfg: Experiment, bad: Problems | None = None) -> list[str]:
    """Cross-field rules; each message names key, value, what is allowed, and the fix.

    A rule that reads a key in ``bad`` (a value that failed its type check and was replaced by the default) is
    skipped: its verdict would be about the default, not about the user's file.
    """
    p: list[str] = []
    skip = bad if bad is not None else Problems()

    def add(deps: tuple[str, ...], text: str) -> None:
        if not skip.touches(deps):
            p.append(text)

    if not _K8S_NAME.match(cfg.name) or len(cfg.name) > 40:
        add(("name",),
            f"name: {cfg.name[:80]!r} is not usable as a job id / Kubernetes name; allowed: lower-case letters, digits and '-', "
            f"at most 40 characters; fix: e.g. `name: {re.sub('[^a-z0-9-]+', '-', cfg.name.lower()).strip('-')[:40] or 'my-experiment'}`")
    if cfg.ray.address and not re.match(r"^(https?)://", cfg.ray.address):
        add(("ray.address",), f"ray.address: {_show('ray.address', cfg.ray.address)} is not a dashboard URL; allowed: http(s)://host:port; "
            "fix: use the dashboard address (port 8265), not ray://")
    for key in ("dashboard_port", "port"):
        v = getattr(cfg.ray, key)
        if not 1 <= v <= 65535:
            add((f"ray.{key}",), f"ray.{key}: {v} is not a TCP port; allowed: 1..65535; fix: e.g. 8265 for the dashboard, 6379 for the head")
    for rules in CONTRIBUTIONS.rules.values():  # what only one backend / trainer needs is its registry's rule
        for deps, text in rules(cfg):
            add(deps, text)
    if cfg.storage.bucket and cfg.storage.bucket.startswith("gs://"):
        add(("storage.bucket",), f"storage.bucket: {cfg.storage.bucket!r} includes the gs:// scheme; fix: `bucket: {cfg.storage.bucket[5:]}`")
    if not cfg.storage.mount_path.startswith("/"):
        add(("storage.mount_path",), f"storage.mount_path: {cfg.storage.mount_path!r} must be absolute; fix: e.g. `/data`")
    if cfg.cluster.provisioning == "reservation" and not cfg.cluster.reservation:
        add(("cluster.provisioning", "cluster.reservation"),
            "cluster.reservation: required when cluster.provisioning is 'reservation'; fix: set the reservation name or use `provisioning: spot`")
    expected = GPU_TYPES.get(cfg.cluster.gpu_type, {}).get("gpus_per_node")  # a GKE machine type's; else any count
    if expected is not None and cfg.cluster.gpus_per_node != expected:
        add(("cluster.gpus_per_node", "cluster.gpu_type"),
            f"cluster.gpus_per_node: {cfg.cluster.gpus_per_node} does not match {cfg.cluster.gpu_type} "
            f"({cfg.cluster.machine_type} has {expected}); fix: set `cluster.gpus_per_node` to {expected}")
    floor = gke_version_too_old(cfg.cluster.gke_version or "", cfg.cluster.gpu_type)
    if floor:
        add(("cluster.gke_version", "cluster.gpu_type"),
            f"cluster.gke_version: {cfg.cluster.gke_version!r} is older than GKE supports {cfg.cluster.gpu_type} on "
            f"(>= {floor}, Google's NeMo RL on GKE tutorial); fix: `gke_version: {floor}` or newer, or leave it unset "
            "for the release channel's default")
    if cfg.cluster.worker_replicas < 1:
        add(("cluster.worker_replicas",),
            f"cluster.worker_replicas: {cfg.cluster.worker_replicas} must be >= 1; fix: set it to the number of GPU nodes")
    for key in ("num_prompts_per_step", "num_generations_per_prompt", "max_num_steps"):
        if getattr(cfg.grpo, key) < 1:
            add((f"grpo.{key}",), f"grpo.{key}: {getattr(cfg.grpo, key)} must be >= 1; fix: use a positive integer")
    if cfg.grpo.num_generations_per_prompt < 2 and cfg.grpo.use_leave_one_out_baseline:
        add(("grpo.num_generations_per_prompt", "grpo.use_leave_one_out_baseline"),
            "grpo.num_generations_per_prompt: GRPO needs a group of at least 2 for a leave-one-out baseline; fix: set it to 2 or more")
    if not 0 <= cfg.grpo.kl_penalty:
        add(("grpo.kl_penalty",), f"grpo.kl_penalty: {cfg.grpo.kl_penalty} must be >= 0; fix: e.g. 0.01")
    _number_checks(cfg, add)
    _free_text_checks(cfg, add)
    _checkpoint_checks(cfg, add)
    _secret_checks(cfg, add)
    _trainer_checks(cfg, add)
    _rehearsal_checks(cfg, add)
    _infra_and_trainer_checks(cfg, add)
    return p


def _infra_and_trainer_checks(cfg: Experiment, add) -> None:
    """Pins and values the trainers and the cluster need (issue #14): MTU, NCCL installer ref, rewards."""
    c, t = cfg.cluster, cfg.trainer
    if not 1300 <= c.gvnic_mtu <= 8896:
        add(("cluster.gvnic_mtu",), f"cluster.gvnic_mtu: {c.gvnic_mtu} is outside what a VPC accepts; allowed: 1300..8896 "
            "(gcloud compute networks create --help); fix: 8896, the value of Google's A4 / A3 Ultra guidance")
    ref = c.nccl_installer_ref
    if ref in ("master", "main", "HEAD", "") or not re.match(r"^[A-Za-z0-9._-]+$", ref):
        add(("cluster.nccl_installer_ref",),
            f"cluster.nccl_installer_ref: {ref!r} does not pin the installer (a branch moves under you); fix: a commit "
            "or tag of GoogleCloudPlatform/container-engine-accelerators, e.g. the default "
            "`2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae`")
    for i, spec in enumerate(t.reward_functions):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            add(("trainer.reward_functions",), f"trainer.reward_functions[{i}]: {spec!r} is not a reward spec; fix: "
                "`{name: format, weight: 0.2}` (NeMo-RL's shape; kwargs optional)")
    if t.reward_module and not t.reward_functions:
        add(("trainer.reward_module", "trainer.reward_functions"),
            "trainer.reward_module: set without trainer.reward_functions, so nothing would use it; fix: list the mix, "
            "e.g. `reward_functions: [{name: my_reward, weight: 1.0}]`")


def _checkpoint_checks(cfg: Experiment, add) -> None:
    c = cfg.checkpointing
    mn = c.metric_name
    if mn is not None and not re.match(r"^(val|train):\S+$", mn):
        add(("checkpointing.metric_name",),
            f"checkpointing.metric_name: {mn[:80]!r} must be `val:<name>` or `train:<name>` (NeMo-RL); fix: e.g. `val:accuracy`")
    if not c.dtensor_v2 and c.model_save_format is not None:
        add(("checkpointing.dtensor_v2", "checkpointing.model_save_format"),
            f"checkpointing.model_save_format: {c.model_save_format!r} is only valid with dtensor_v2: true; "
            "fix: set `model_save_format: null` for the DTensor v1 layout")
    if c.dtensor_v2 and c.model_save_format is None:
        add(("checkpointing.dtensor_v2", "checkpointing.model_save_format"),
            "checkpointing.model_save_format: null needs dtensor_v2: false; allowed with v2: 'safetensors' | 'torch_save'; fix: pick one")


def _number_checks(cfg: Experiment, add) -> None:
    """Numbers a trainer would take and fail on much later (or train on silently): NaN, inf, zero, negative."""
    lr, temp = cfg.grpo.learning_rate, cfg.grpo.temperature
    if not (math.isfinite(lr) and lr > 0):
        add(("grpo.learning_rate",), f"grpo.learning_rate: {lr} must be a finite number > 0; fix: e.g. 1.0e-6")
    if not (math.isfinite(temp) and temp >= 0):
        add(("grpo.temperature",), f"grpo.temperature: {temp} must be a finite number >= 0 (0 is greedy); fix: e.g. 1.0")
    if cfg.grpo.max_new_tokens is not None and cfg.grpo.max_new_tokens < 1:
        add(("grpo.max_new_tokens",), f"grpo.max_new_tokens: {cfg.grpo.max_new_tokens} must be >= 1 (or null: the "
            "trainer's default); fix: e.g. 1024")
    if cfg.model.max_total_sequence_length < 1:
        add(("model.max_total_sequence_length",), f"model.max_total_sequence_length: "
            f"{cfg.model.max_total_sequence_length} must be >= 1; fix: e.g. 1024 (prompt plus generation)")


_OWN_SECRET_RULES = ("secrets", "trainer.overrides", "trainer.env_vars")  # scanned by the rules that know them
_REVISION = re.compile(r"(_ref|revision|commit|sha|digest|hash)$", re.IGNORECASE)  # keys whose value is a git SHA


def _strings(obj, key: str):
    """(dotted key, text) of every string in the config tree: fields, list items, dict keys and values."""
    if isinstance(obj, str):
        yield key, obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _strings(getattr(obj, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k, f"{key}.{_part(str(k))}")
            yield from _strings(v, f"{key}.{_part(str(k))}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _strings(v, f"{key}[{i}]")


def _free_text_checks(cfg: Experiment, add) -> None:
    """Every free-text value (a W&B project, a model name, a data dir…) is printed in the job's entry point, the
    manifests or the card: a token pasted into any of them is refused like one in an env var."""
    for key, text in _strings(cfg, ""):
        if key.startswith(_OWN_SECRET_RULES) or len(text) < 16:
            continue
        kind = token_kind(text, names=False)
        if kind and "hexadecimal" in kind and (_REVISION.search(key) or not re.fullmatch(r"[0-9a-fA-F]+", text.strip())):
            continue  # a git commit (a *_ref, a revision) or a digest inside a path is not a key; hex elsewhere is
        if kind:
            add((key,), f"{key}: the value {redact(text)} looks like {kind}; it would be printed in the job's entry "
                "point, manifests and logs; fix: remove it (and revoke it if the file was shared); secrets go in "
                "`secrets:` by NAME (`hf_token: {env: HF_TOKEN}`)")


def _secret_checks(cfg: Experiment, add) -> None:
    """``secrets.*`` hold NAMES (an env var, a Kubernetes Secret, a key in it); no value is ever shown."""
    for sname, env_name in (("hf_token", "HF_TOKEN"), ("wandb_api_key", "WANDB_API_KEY")):
        ref = getattr(cfg.secrets, sname)
        if ref is None:
            continue
        where = f"secrets.{sname}"
        if not ref.env and not ref.k8s_secret:
            add((where,), f"{where}: names neither `env` nor `k8s_secret`; fix: e.g. `{sname}: {{env: {env_name}}}`")
        if ref.env and (kind := token_kind(ref.env)):
            add((f"{where}.env",),
                f"{where}.env: {redact(ref.env)} looks like {kind}, i.e. the secret itself, not the NAME of an environment "
                f"variable; it would be written in clear into manifests and plan scripts; fix: put the NAME of the env var "
                f"here (`env: {env_name}`) and export the value in your shell (`export {env_name}=...`), then revoke the "
                "pasted token if this file was shared")
        elif ref.env and not _ENV_NAME.match(ref.env):
            add((f"{where}.env",),
                f"{where}.env: {redact(ref.env)} must be the NAME of an environment variable (letters, digits, '_'), not "
                f"its value; fix: `env: {env_name}` and export the value in your shell (`export {env_name}=...`)")
        if ref.k8s_secret and (kind := token_kind(ref.k8s_secret)):
            add((f"{where}.k8s_secret",),
                f"{where}.k8s_secret: {redact(ref.k8s_secret)} looks like {kind}, not the NAME of a Kubernetes Secret; "
                f"fix: put the Secret's NAME here (e.g. `k8s_secret: hf-token`) and the env var's NAME in `env` "
                f"(`env: {env_name}`, exported in your shell): nbtools creates the Secret from it")
        elif ref.k8s_secret and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", ref.k8s_secret):
            add((f"{where}.k8s_secret",),
                f"{where}.k8s_secret: {redact(ref.k8s_secret)} is not a Kubernetes Secret name (lower-case letters, "
                "digits, '-' and '.'); fix: e.g. `k8s_secret: hf-token`")
        if ref.key and (kind := token_kind(ref.key)):
            add((f"{where}.key",),
                f"{where}.key: {redact(ref.key)} looks like {kind}, not the NAME of a key inside the Secret; "
                f"fix: e.g. `key: token`, and put the env var's NAME in `env` (`env: {env_name}`, exported in your shell)")
        if ref.k8s_secret and not ref.key:
            add((f"{where}.key", f"{where}.k8s_secret"),
                f"{where}.key: required with k8s_secret; fix: name the key inside the Secret, e.g. `key: token`")


def _trainer_checks(cfg: Experiment, add) -> None:
    t = cfg.trainer
    if not t.colocated and (t.generation_nodes is None and t.generation_gpus_per_node is None):
        add(("trainer.colocated", "trainer.generation_nodes", "trainer.generation_gpus_per_node"),
            "trainer.generation_nodes: non-colocated generation needs its resources; fix: set `generation_nodes` "
            "(multi-node) or `generation_gpus_per_node` (single node)")
    for i, ov in enumerate(t.overrides):
        if "=" not in ov and not ov.startswith("~"):
            add((f"trainer.overrides[{i}]",),
                f"trainer.overrides[{i}]: {_show('trainer.overrides', ov)} is not a Hydra override; fix: write `key=value` "
                "(`+key=value` to add a key)")
        elif (kind := token_kind(ov.partition("=")[2], names=False)):
            add((f"trainer.overrides[{i}]",),
                f"trainer.overrides[{i}]: the value {redact(ov.partition('=')[2])} looks like {kind}; overrides are "
                "shown in the job's entrypoint on the Ray dashboard; fix: reference secrets in `secrets:` by NAME")
    for name, value in t.env_vars.items():
        key = f"trainer.env_vars.{_part(name)}"
        secret_field = "wandb_api_key" if name == "WANDB_API_KEY" else "hf_token"
        if name in SECRET_ENV_VARS:
            add((key,), f"{key}: secrets must not be job env vars (the Ray dashboard shows every job's env_vars); "
                f"fix: remove it and set `secrets.{secret_field}: {{env: {name if name != 'HUGGING_FACE_HUB_TOKEN' else 'HF_TOKEN'}}}` "
                "(the value stays in your shell)")
        elif token_kind(name):
            add((key,), f"{key}: the variable's name looks like a token; fix: use a NAME such as `MY_SETTING`, and put "
                "secrets in `secrets:` by NAME")
        elif (kind := token_kind(value, names=False)):
            add((key,), f"{key}: the value {redact(value)} looks like {kind}; job env vars are shown on the Ray "
                "dashboard; fix: remove it, export the value in your shell and reference it by NAME under `secrets:` "
                "(`hf_token: {env: HF_TOKEN}` / `wandb_api_key: {env: WANDB_API_KEY}`)")


def _rehearsal_checks(cfg: Experiment, add) -> None:
    r = cfg.rehearsal
    if r.ranks < 1:
        add(("rehearsal.ranks",), f"rehearsal.ranks: {r.ranks} must be >= 1; fix: 2 runs FSDP2 on two CPU processes")
    if not 0.0 < r.lr_warmup_start_factor <= 1.0:
        add(("rehearsal.lr_warmup_start_factor",), f"rehearsal.lr_warmup_start_factor: {r.lr_warmup_start_factor} "
            "is outside (0, 1] (torch's LinearLR start_factor); fix: 0.1 as in NeMo-RL's configs, or 0.01 to start "
            "the warmup near zero")

