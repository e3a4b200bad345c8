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
from nbtools.errors import Problem

SECRET_ENV_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")  # never in trainer.env_vars



def _semantic_checks(cfg: Experiment, bad: Problems | None = None) -> list[Problem]:
    """Cross-field rules; each :class:`Problem` names key, value, what is allowed, and the fix.

    A rule that reads a key in ``bad`` (a value that failed its type check and was replaced by the default) is
    skipped: its verdict would be about the default, not about the user's file. A registry's rule may hand its
    problem as one sentence (``key: what; fix: action``); it is read into a Problem here.
    """
    p: list[Problem] = []
    skip = bad if bad is not None else Problems()

    def add(deps: tuple[str, ...], key: str | Problem, what: str = "", fix: str = "", *, value: str | None = None,
            allowed: str | None = None) -> None:
        if skip.touches(deps):
            return
        if isinstance(key, Problem):
            p.append(key)
        elif not what:  # a registry's rule: one sentence
            p.append(Problem.from_text(key))
        else:
            p.append(Problem(key, value, allowed, fix, what=what))

    if not _K8S_NAME.match(cfg.name) or len(cfg.name) > 40:
        allowed = "lower-case letters, digits and '-', at most 40 characters"
        add(("name",), "name", f"{cfg.name[:80]!r} is not usable as a job id / Kubernetes name; allowed: {allowed}",
            f"e.g. `name: {re.sub('[^a-z0-9-]+', '-', cfg.name.lower()).strip('-')[:40] or 'my-experiment'}`",
            value=repr(cfg.name[:80]), allowed=allowed)
    if cfg.ray.address and not re.match(r"^(https?)://", cfg.ray.address):
        shown = _show("ray.address", cfg.ray.address)
        add(("ray.address",), "ray.address", f"{shown} is not a dashboard URL; allowed: http(s)://host:port",
            "use the dashboard address (port 8265), not ray://", value=shown, allowed="http(s)://host:port")
    for key in ("dashboard_port", "port"):
        v = getattr(cfg.ray, key)
        if not 1 <= v <= 65535:
            add((f"ray.{key}",), f"ray.{key}", f"{v} is not a TCP port; allowed: 1..65535",
                "e.g. 8265 for the dashboard, 6379 for the head", value=str(v), allowed="1..65535")
    for rules in CONTRIBUTIONS.rules.values():  # what only one backend / trainer needs is its registry's rule
        for deps, problem in rules(cfg):
            add(deps, problem)
    if cfg.storage.bucket and cfg.storage.bucket.startswith("gs://"):
        add(("storage.bucket",), "storage.bucket", f"{cfg.storage.bucket!r} includes the gs:// scheme",
            f"`bucket: {cfg.storage.bucket[5:]}`", value=repr(cfg.storage.bucket), allowed="a bucket name")
    if not cfg.storage.mount_path.startswith("/"):
        add(("storage.mount_path",), "storage.mount_path", f"{cfg.storage.mount_path!r} must be absolute", "e.g. `/data`",
            value=repr(cfg.storage.mount_path), allowed="an absolute path")
    if cfg.cluster.provisioning == "reservation" and not cfg.cluster.reservation:
        add(("cluster.provisioning", "cluster.reservation"), "cluster.reservation",
            "required when cluster.provisioning is 'reservation'", "set the reservation name or use `provisioning: spot`")
    expected = GPU_TYPES.get(cfg.cluster.gpu_type, {}).get("gpus_per_node")  # a GKE machine type's; else any count
    if expected is not None and cfg.cluster.gpus_per_node != expected:
        add(("cluster.gpus_per_node", "cluster.gpu_type"), "cluster.gpus_per_node",
            f"{cfg.cluster.gpus_per_node} does not match {cfg.cluster.gpu_type} ({cfg.cluster.machine_type} has {expected})",
            f"set `cluster.gpus_per_node` to {expected}", value=str(cfg.cluster.gpus_per_node), allowed=str(expected))
    floor = gke_version_too_old(cfg.cluster.gke_version or "", cfg.cluster.gpu_type)
    if floor:
        add(("cluster.gke_version", "cluster.gpu_type"), "cluster.gke_version",
            f"{cfg.cluster.gke_version!r} is older than GKE supports {cfg.cluster.gpu_type} on "
            f"(>= {floor}, Google's NeMo RL on GKE tutorial)",
            f"`gke_version: {floor}` or newer, or leave it unset for the release channel's default",
            value=repr(cfg.cluster.gke_version), allowed=f">= {floor}")
    if cfg.cluster.worker_replicas < 1:
        add(("cluster.worker_replicas",), "cluster.worker_replicas", f"{cfg.cluster.worker_replicas} must be >= 1",
            "set it to the number of GPU nodes", value=str(cfg.cluster.worker_replicas), allowed=">= 1")
    for key in ("num_prompts_per_step", "num_generations_per_prompt", "max_num_steps"):
        if getattr(cfg.grpo, key) < 1:
            add((f"grpo.{key}",), f"grpo.{key}", f"{getattr(cfg.grpo, key)} must be >= 1", "use a positive integer",
                value=str(getattr(cfg.grpo, key)), allowed=">= 1")
    if cfg.grpo.num_generations_per_prompt < 2 and cfg.grpo.use_leave_one_out_baseline:
        add(("grpo.num_generations_per_prompt", "grpo.use_leave_one_out_baseline"), "grpo.num_generations_per_prompt",
            "GRPO needs a group of at least 2 for a leave-one-out baseline", "set it to 2 or more",
            value=str(cfg.grpo.num_generations_per_prompt), allowed=">= 2")
    if not 0 <= cfg.grpo.kl_penalty:
        add(("grpo.kl_penalty",), "grpo.kl_penalty", f"{cfg.grpo.kl_penalty} must be >= 0", "e.g. 0.01",
            value=str(cfg.grpo.kl_penalty), allowed=">= 0")
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
        add(("cluster.gvnic_mtu",), "cluster.gvnic_mtu", f"{c.gvnic_mtu} is outside what a VPC accepts; allowed: 1300..8896 "
            "(gcloud compute networks create --help)", "8896, the value of Google's A4 / A3 Ultra guidance",
            value=str(c.gvnic_mtu), allowed="1300..8896")
    ref = c.nccl_installer_ref
    if ref in ("master", "main", "HEAD", "") or not re.match(r"^[A-Za-z0-9._-]+$", ref):
        add(("cluster.nccl_installer_ref",), "cluster.nccl_installer_ref",
            f"{ref!r} does not pin the installer (a branch moves under you)", "a commit or tag of "
            "GoogleCloudPlatform/container-engine-accelerators, e.g. the default `2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae`",
            value=repr(ref), allowed="a commit or tag")
    for i, spec in enumerate(t.reward_functions):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            shown = _show(f"trainer.reward_functions[{i}]", spec)
            add(("trainer.reward_functions",), f"trainer.reward_functions[{i}]", f"{shown} is not a reward spec",
                "`{name: format, weight: 0.2}` (NeMo-RL's shape; kwargs optional)", value=shown,
                allowed="a mapping with a `name`")
    if t.reward_module and not t.reward_functions:
        add(("trainer.reward_module", "trainer.reward_functions"), "trainer.reward_module",
            "set without trainer.reward_functions, so nothing would use it",
            "list the mix, e.g. `reward_functions: [{name: my_reward, weight: 1.0}]`")


def _checkpoint_checks(cfg: Experiment, add) -> None:
    c = cfg.checkpointing
    mn = c.metric_name
    if mn is not None and not re.match(r"^(val|train):\S+$", mn):
        add(("checkpointing.metric_name",), "checkpointing.metric_name",
            f"{mn[:80]!r} must be `val:<name>` or `train:<name>` (NeMo-RL)", "e.g. `val:accuracy`",
            value=repr(mn[:80]), allowed="val:<name> | train:<name>")
    if not c.dtensor_v2 and c.model_save_format is not None:
        add(("checkpointing.dtensor_v2", "checkpointing.model_save_format"), "checkpointing.model_save_format",
            f"{c.model_save_format!r} is only valid with dtensor_v2: true",
            "set `model_save_format: null` for the DTensor v1 layout", value=repr(c.model_save_format), allowed="null")
    if c.dtensor_v2 and c.model_save_format is None:
        add(("checkpointing.dtensor_v2", "checkpointing.model_save_format"), "checkpointing.model_save_format",
            "null needs dtensor_v2: false; allowed with v2: 'safetensors' | 'torch_save'", "pick one",
            value="None", allowed="'safetensors' | 'torch_save'")


def _number_checks(cfg: Experiment, add) -> None:
    """Numbers a trainer would take and fail on much later (or train on silently): NaN, inf, zero, negative."""
    lr, temp = cfg.grpo.learning_rate, cfg.grpo.temperature
    if not (math.isfinite(lr) and lr > 0):
        add(("grpo.learning_rate",), "grpo.learning_rate", f"{lr} must be a finite number > 0", "e.g. 1.0e-6",
            value=str(lr), allowed="a finite number > 0")
    if not (math.isfinite(temp) and temp >= 0):
        add(("grpo.temperature",), "grpo.temperature", f"{temp} must be a finite number >= 0 (0 is greedy)", "e.g. 1.0",
            value=str(temp), allowed="a finite number >= 0")
    if cfg.grpo.max_new_tokens is not None and cfg.grpo.max_new_tokens < 1:
        add(("grpo.max_new_tokens",), "grpo.max_new_tokens",
            f"{cfg.grpo.max_new_tokens} must be >= 1 (or null: the trainer's default)", "e.g. 1024",
            value=str(cfg.grpo.max_new_tokens), allowed=">= 1 | null")
    if cfg.model.max_total_sequence_length < 1:
        add(("model.max_total_sequence_length",), "model.max_total_sequence_length",
            f"{cfg.model.max_total_sequence_length} must be >= 1", "e.g. 1024 (prompt plus generation)",
            value=str(cfg.model.max_total_sequence_length), allowed=">= 1")


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
            add((key,), key, f"the value {redact(text)} looks like {kind}; it would be printed in the job's entry "
                "point, manifests and logs", "remove it (and revoke it if the file was shared); secrets go in "
                "`secrets:` by NAME (`hf_token: {env: HF_TOKEN}`)", value=redact(text), allowed="no secret")


def _secret_checks(cfg: Experiment, add) -> None:
    """``secrets.*`` hold NAMES (an env var, a Kubernetes Secret, a key in it); no value is ever shown."""
    for sname, env_name in (("hf_token", "HF_TOKEN"), ("wandb_api_key", "WANDB_API_KEY")):
        ref = getattr(cfg.secrets, sname)
        if ref is None:
            continue
        where = f"secrets.{sname}"
        if not ref.env and not ref.k8s_secret:
            add((where,), where, "names neither `env` nor `k8s_secret`", f"e.g. `{sname}: {{env: {env_name}}}`")
        if ref.env and (kind := token_kind(ref.env)):
            add((f"{where}.env",), f"{where}.env",
                f"{redact(ref.env)} looks like {kind}, i.e. the secret itself, not the NAME of an environment "
                "variable; it would be written in clear into manifests and plan scripts",
                f"put the NAME of the env var here (`env: {env_name}`) and export the value in your shell "
                f"(`export {env_name}=...`), then revoke the pasted token if this file was shared",
                value=redact(ref.env), allowed="an environment variable's NAME")
        elif ref.env and not _ENV_NAME.match(ref.env):
            add((f"{where}.env",), f"{where}.env",
                f"{redact(ref.env)} must be the NAME of an environment variable (letters, digits, '_'), not its value",
                f"`env: {env_name}` and export the value in your shell (`export {env_name}=...`)",
                value=redact(ref.env), allowed="letters, digits, '_'")
        if ref.k8s_secret and (kind := token_kind(ref.k8s_secret)):
            add((f"{where}.k8s_secret",), f"{where}.k8s_secret",
                f"{redact(ref.k8s_secret)} looks like {kind}, not the NAME of a Kubernetes Secret",
                f"put the Secret's NAME here (e.g. `k8s_secret: hf-token`) and the env var's NAME in `env` "
                f"(`env: {env_name}`, exported in your shell): nbtools creates the Secret from it",
                value=redact(ref.k8s_secret), allowed="a Kubernetes Secret's NAME")
        elif ref.k8s_secret and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", ref.k8s_secret):
            add((f"{where}.k8s_secret",), f"{where}.k8s_secret",
                f"{redact(ref.k8s_secret)} is not a Kubernetes Secret name (lower-case letters, digits, '-' and '.')",
                "e.g. `k8s_secret: hf-token`", value=redact(ref.k8s_secret), allowed="lower-case letters, digits, '-' and '.'")
        if ref.key and (kind := token_kind(ref.key)):
            add((f"{where}.key",), f"{where}.key", f"{redact(ref.key)} looks like {kind}, not the NAME of a key inside the Secret",
                f"e.g. `key: token`, and put the env var's NAME in `env` (`env: {env_name}`, exported in your shell)",
                value=redact(ref.key), allowed="a key's NAME")
        if ref.k8s_secret and not ref.key:
            add((f"{where}.key", f"{where}.k8s_secret"), f"{where}.key", "required with k8s_secret",
                "name the key inside the Secret, e.g. `key: token`")


def _trainer_checks(cfg: Experiment, add) -> None:
    t = cfg.trainer
    if not t.colocated and (t.generation_nodes is None and t.generation_gpus_per_node is None):
        add(("trainer.colocated", "trainer.generation_nodes", "trainer.generation_gpus_per_node"), "trainer.generation_nodes",
            "non-colocated generation needs its resources",
            "set `generation_nodes` (multi-node) or `generation_gpus_per_node` (single node)")
    for i, ov in enumerate(t.overrides):
        if "=" not in ov and not ov.startswith("~"):
            shown = _show("trainer.overrides", ov)
            add((f"trainer.overrides[{i}]",), f"trainer.overrides[{i}]", f"{shown} is not a Hydra override",
                "write `key=value` (`+key=value` to add a key)", value=shown, allowed="key=value")
        elif (kind := token_kind(ov.partition("=")[2], names=False)):
            shown = redact(ov.partition("=")[2])
            add((f"trainer.overrides[{i}]",), f"trainer.overrides[{i}]", f"the value {shown} looks like {kind}; overrides are "
                "shown in the job's entrypoint on the Ray dashboard", "reference secrets in `secrets:` by NAME",
                value=shown, allowed="no secret")
    for name, value in t.env_vars.items():
        key = f"trainer.env_vars.{_part(name)}"
        secret_field = "wandb_api_key" if name == "WANDB_API_KEY" else "hf_token"
        if name in SECRET_ENV_VARS:
            add((key,), key, "secrets must not be job env vars (the Ray dashboard shows every job's env_vars)",
                f"remove it and set `secrets.{secret_field}: {{env: {name if name != 'HUGGING_FACE_HUB_TOKEN' else 'HF_TOKEN'}}}` "
                "(the value stays in your shell)", value=redact(value), allowed="no secret")
        elif token_kind(name):
            add((key,), key, "the variable's name looks like a token",
                "use a NAME such as `MY_SETTING`, and put secrets in `secrets:` by NAME", allowed="a NAME")
        elif (kind := token_kind(value, names=False)):
            add((key,), key, f"the value {redact(value)} looks like {kind}; job env vars are shown on the Ray dashboard",
                "remove it, export the value in your shell and reference it by NAME under `secrets:` "
                "(`hf_token: {env: HF_TOKEN}` / `wandb_api_key: {env: WANDB_API_KEY}`)", value=redact(value),
                allowed="no secret")


def _rehearsal_checks(cfg: Experiment, add) -> None:
    r = cfg.rehearsal
    if r.ranks < 1:
        add(("rehearsal.ranks",), "rehearsal.ranks", f"{r.ranks} must be >= 1", "2 runs FSDP2 on two CPU processes",
            value=str(r.ranks), allowed=">= 1")
    if not 0.0 < r.lr_warmup_start_factor <= 1.0:
        add(("rehearsal.lr_warmup_start_factor",), "rehearsal.lr_warmup_start_factor",
            f"{r.lr_warmup_start_factor} is outside (0, 1] (torch's LinearLR start_factor)",
            "0.1 as in NeMo-RL's configs, or 0.01 to start the warmup near zero", value=str(r.lr_warmup_start_factor),
            allowed="(0, 1]")

