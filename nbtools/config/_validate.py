"""Plain data → typed sections, collecting every problem (type errors, unknown keys, cross-field rules)."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any, Literal

from nbtools.config._sections import _ENV_NAME, _K8S_NAME, GPU_TYPES, Experiment


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


def _build(cls: type, data: Any, prefix: str, problems: list[str]) -> Any:
    """Recursively convert plain data to dataclass ``cls``, appending every problem found."""
    where = prefix.rstrip(".") or "<top level>"
    if not isinstance(data, dict):
        problems.append(f"{where}: expected a mapping, got {data!r}; fix: write it as `key: value` lines")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean `{prefix}{close[0]}`?" if close else f"allowed keys: {', '.join(fields)}"
            problems.append(f"{prefix}{key}: unknown key (value {value!r}); fix: {hint}")
            continue
        kwargs[key] = _convert(hints[key], value, f"{prefix}{key}", problems)
    for name, f in fields.items():
        if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            problems.append(f"{prefix}{name}: required key is missing; fix: add `{name}: ...` to the {where} section")
    try:
        return cls(**{k: v for k, v in kwargs.items() if v is not _BAD})
    except TypeError:
        return None


_BAD = object()


def _convert(tp: Any, value: Any, key: str, problems: list[str]) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _convert(non_none[0], value, key, problems)
        for a in non_none:
            sub: list[str] = []
            out = _convert(a, value, key, sub)
            if not sub:
                return out
        problems.append(f"{key}: {value!r} is not one of {_type_name(tp)}; fix: use one of those")
        return _BAD
    if origin is Literal:
        if value in args:
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{key}: {value!r} is not allowed; allowed: {', '.join(repr(a) for a in args)}{hint}; fix: set `{key}` to one of them")
        return _BAD
    if dataclasses.is_dataclass(tp):
        if value is None:
            return tp()
        built = _build(tp, value, key + ".", problems)
        return built if built is not None else _BAD
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {value!r}; fix: write it as a YAML list (`- item`)")
            return _BAD
        return [_convert(args[0], v, f"{key}[{i}]", problems) for i, v in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {value!r}; fix: write it as `key: value` lines")
            return _BAD
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.append(f"{key}: expected true or false, got {value!r}; fix: write `{key.rsplit('.', 1)[-1]}: true` or `false` (no quotes)")
        return _BAD
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        problems.append(f"{key}: expected an integer, got {value!r}; fix: write a whole number")
        return _BAD
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        problems.append(f"{key}: expected a number, got {value!r}; fix: write a number such as 0.01 or 1e-6")
        return _BAD
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        problems.append(f"{key}: expected a string, got {value!r}; fix: quote the value")
        return _BAD
    return value


def _semantic_checks(cfg: Experiment) -> list[str]:
    """Cross-field rules; each message names key, value, what is allowed, and the fix."""
    p: list[str] = []
    if not _K8S_NAME.match(cfg.name) or len(cfg.name) > 40:
        p.append(
            f"name: {cfg.name!r} is not usable as a job id / Kubernetes name; allowed: lower-case letters, digits and '-', "
            f"at most 40 characters; fix: e.g. `name: {re.sub('[^a-z0-9-]+', '-', cfg.name.lower()).strip('-')[:40] or 'my-experiment'}`"
        )
    if cfg.backend == "ray" and not cfg.ray.address:
        p.append("ray.address: missing for backend 'ray'; fix: set `ray.address: http://<head>:8265` (the Ray dashboard URL)")
    if cfg.ray.address and not re.match(r"^(https?)://", cfg.ray.address):
        p.append(f"ray.address: {cfg.ray.address!r} is not a dashboard URL; allowed: http(s)://host:port; fix: use the dashboard address (port 8265), not ray://")
    for key in ("dashboard_port", "port"):
        v = getattr(cfg.ray, key)
        if not 1 <= v <= 65535:
            p.append(f"ray.{key}: {v} is not a TCP port; allowed: 1..65535; fix: e.g. 8265 for the dashboard, 6379 for the head")
    if cfg.backend == "gke":
        if not cfg.gcp.project:
            p.append("gcp.project: missing for backend 'gke'; fix: set `gcp.project: <your-project-id>` (see `gcloud projects list`)")
        if not cfg.gcp.zone.startswith(cfg.gcp.region):
            p.append(f"gcp.zone: {cfg.gcp.zone!r} is not in region {cfg.gcp.region!r}; fix: pick a zone like `{cfg.gcp.region}-b`")
        if cfg.storage.kind == "gcsfuse" and not cfg.storage.bucket:
            p.append("storage.bucket: missing for gcsfuse storage on gke; fix: set `storage.bucket: <bucket-name>` (no gs:// prefix)")
        if cfg.storage.kind == "lustre" and not (cfg.storage.lustre and cfg.storage.lustre.instance and cfg.storage.lustre.ip):
            p.append("storage.lustre: instance and ip are required for lustre storage; fix: set `storage.lustre.instance` and `storage.lustre.ip`")
        if not _K8S_NAME.match(cfg.cluster.name):
            p.append(f"cluster.name: {cfg.cluster.name!r} is not a valid GKE/Kubernetes name; fix: lower-case letters, digits and '-'")
    if cfg.storage.bucket and cfg.storage.bucket.startswith("gs://"):
        p.append(f"storage.bucket: {cfg.storage.bucket!r} includes the gs:// scheme; fix: `bucket: {cfg.storage.bucket[5:]}`")
    if not cfg.storage.mount_path.startswith("/"):
        p.append(f"storage.mount_path: {cfg.storage.mount_path!r} must be absolute; fix: e.g. `/data`")
    if cfg.cluster.provisioning == "reservation" and not cfg.cluster.reservation:
        p.append("cluster.reservation: required when cluster.provisioning is 'reservation'; fix: set the reservation name or use `provisioning: spot`")
    expected = GPU_TYPES[cfg.cluster.gpu_type]["gpus_per_node"]
    if cfg.cluster.gpus_per_node != expected:
        p.append(
            f"cluster.gpus_per_node: {cfg.cluster.gpus_per_node} does not match {cfg.cluster.gpu_type} "
            f"({cfg.cluster.machine_type} has {expected}); fix: set `cluster.gpus_per_node` to {expected}"
        )
    c = cfg.cluster
    if not 1300 <= c.gvnic_mtu <= 8896:
        p.append(f"cluster.gvnic_mtu: {c.gvnic_mtu} is outside what a VPC accepts; allowed: 1300..8896 (gcloud compute "
                 "networks create --help); fix: 8896, the value of Google's A4 / A3 Ultra guidance")
    ref = c.nccl_installer_ref
    if ref in ("master", "main", "HEAD", "") or not re.match(r"^[A-Za-z0-9._-]+$", ref):
        p.append(f"cluster.nccl_installer_ref: {ref!r} does not pin the installer (a branch moves under you); fix: a commit "
                 "or tag of GoogleCloudPlatform/container-engine-accelerators, e.g. the default "
                 "`2c776f7e9656a2b6476f19938b738b4186000ce3`")
    if c.gpu_driver_version == "disabled" and cfg.backend == "gke" and c.mode == "standard":
        p.append("cluster.gpu_driver_version: 'disabled' leaves the GPU nodes without an NVIDIA driver (GKE installs "
                 "none), so no pod gets a GPU; fix: `gpu_driver_version: latest` (or `default`)")
    if cfg.trainer.kind == "verl" and (cfg.trainer.verl_ref in ("main", "master", "HEAD", "")
                                       or not re.match(r"^[A-Za-z0-9._/-]+$", cfg.trainer.verl_ref)):
        p.append(f"trainer.verl_ref: {cfg.trainer.verl_ref!r} does not pin verl (a branch moves under you); fix: a release "
                 f"tag of {cfg.trainer.verl_repo}, e.g. `verl_ref: v0.7.0`")
    t = cfg.trainer
    for i, spec in enumerate(t.reward_functions):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            p.append(f"trainer.reward_functions[{i}]: {spec!r} is not a reward spec; fix: `{{name: format, weight: 0.2}}` "
                     "(NeMo-RL's shape; kwargs optional)")
    if t.reward_module and not t.reward_functions:
        p.append("trainer.reward_module: set without trainer.reward_functions, so nothing would use it; fix: list the mix, "
                 "e.g. `reward_functions: [{name: my_reward, weight: 1.0}]`")
    if t.reward_functions and t.kind != "nemo-rl":
        p.append("trainer.reward_functions: only NeMo-RL runs score through the nbtools reward environment; fix: remove it "
                 "for verl (verl's custom_reward_function.path/name go in trainer.overrides)")
    if cfg.cluster.worker_replicas < 1:
        p.append(f"cluster.worker_replicas: {cfg.cluster.worker_replicas} must be >= 1; fix: set it to the number of GPU nodes")
    for key in ("num_prompts_per_step", "num_generations_per_prompt", "max_num_steps"):
        if getattr(cfg.grpo, key) < 1:
            p.append(f"grpo.{key}: {getattr(cfg.grpo, key)} must be >= 1; fix: use a positive integer")
    if cfg.grpo.num_generations_per_prompt < 2 and cfg.grpo.use_leave_one_out_baseline:
        p.append("grpo.num_generations_per_prompt: GRPO needs a group of at least 2 for a leave-one-out baseline; fix: set it to 2 or more")
    if not 0 <= cfg.grpo.kl_penalty:
        p.append(f"grpo.kl_penalty: {cfg.grpo.kl_penalty} must be >= 0; fix: e.g. 0.01")
    mn = cfg.checkpointing.metric_name
    if mn is not None and not re.match(r"^(val|train):\S+$", mn):
        p.append(f"checkpointing.metric_name: {mn!r} must be `val:<name>` or `train:<name>` (NeMo-RL); fix: e.g. `val:accuracy`")
    if not cfg.checkpointing.dtensor_v2 and cfg.checkpointing.model_save_format is not None:
        p.append(
            f"checkpointing.model_save_format: {cfg.checkpointing.model_save_format!r} is only valid with dtensor_v2: true; "
            "fix: set `model_save_format: null` for the DTensor v1 layout"
        )
    if cfg.checkpointing.dtensor_v2 and cfg.checkpointing.model_save_format is None:
        p.append("checkpointing.model_save_format: null needs dtensor_v2: false; allowed with v2: 'safetensors' | 'torch_save'; fix: pick one")
    for sname in ("hf_token", "wandb_api_key"):
        ref = getattr(cfg.secrets, sname)
        if ref is None:
            continue
        if not ref.env and not ref.k8s_secret:
            p.append(f"secrets.{sname}: names neither `env` nor `k8s_secret`; fix: e.g. `{sname}: {{env: {sname.upper()}}}`")
        if ref.env and not _ENV_NAME.match(ref.env):
            p.append(
                f"secrets.{sname}.env: must be the NAME of an environment variable, not its value; "
                f"fix: `env: {'HF_TOKEN' if sname == 'hf_token' else 'WANDB_API_KEY'}` and export the value in your shell"
            )
        if ref.k8s_secret and not ref.key:
            p.append(f"secrets.{sname}.key: required with k8s_secret {ref.k8s_secret!r}; fix: name the key inside the Secret, e.g. `key: token`")
    if not cfg.trainer.colocated and (cfg.trainer.generation_nodes is None and cfg.trainer.generation_gpus_per_node is None):
        p.append("trainer.generation_nodes: non-colocated generation needs its resources; fix: set `generation_nodes` (multi-node) or `generation_gpus_per_node` (single node)")
    for i, ov in enumerate(cfg.trainer.overrides):
        if "=" not in ov and not ov.startswith("~"):
            p.append(f"trainer.overrides[{i}]: {ov!r} is not a Hydra override; fix: write `key=value` (`+key=value` to add a key)")
    if cfg.rehearsal.ranks < 1:
        p.append(f"rehearsal.ranks: {cfg.rehearsal.ranks} must be >= 1; fix: 2 runs FSDP2 on two CPU processes")
    if cfg.backend == "local" and cfg.rehearsal.num_heads and cfg.rehearsal.hidden_size % cfg.rehearsal.num_heads:
        p.append(f"rehearsal.hidden_size: {cfg.rehearsal.hidden_size} is not divisible by num_heads {cfg.rehearsal.num_heads}; fix: e.g. 64 with 4 heads")
    return p
