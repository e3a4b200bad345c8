"""The job's runtime environment: NCCL/gIB variables for the GPU type, HF_HOME on the shared mount, and secrets.

Why: the Ray dashboard shows every job's entrypoint, metadata and ``runtime_env`` (env_vars included) to anyone who
can open it, so secrets must travel another way. On GKE they never leave the cluster: the RayCluster pods read them
from the Kubernetes Secret (``env.valueFrom``, built by ``nbtools.manifests``) and NeMo-RL forwards the driver's
environment to its actors. On a plain Ray address they are read from the caller's environment into a small file
inside an in-memory ``working_dir`` zip, uploaded under a random package name; the entrypoint sources the file and
deletes it before anything else runs. Nothing is written to local disk; the dashboard shows only ``gcs://_ray_pkg_...``.

Example:
    >>> env = runtime_env.env_vars(cfg)
    >>> env["NCCL_TUNER_CONFIG_PATH"]
    '/usr/local/gib/configs/tuner_config_a4.txtpb'
"""

from __future__ import annotations

import hashlib
import io
import uuid
import zipfile

from nbtools import backends, trainers
from nbtools._escape import sh
from nbtools.backends import SECRET_ENV_NAMES, gib_nccl_env, secrets_from_env
from nbtools.config import SECRET_ENV_VARS, Experiment, Secret, redact, token_kind
from nbtools.errors import ConfigError, DependencyError, NbtoolsError

__all__ = [
    "SECRETS_FILE",
    "SECRET_ENV_NAMES",
    "gib_nccl_env",
    "NET_CHOICE",
    "env_vars",
    "secret_values",
    "secrets_from_env",
    "secrets_prelude",
    "zip_working_dir",
    "upload_working_dir",
]

SECRETS_FILE = ".nbtools_env"

# Two ways choose gIB as NCCL's network, and a job uses one: GKE's NCCL_NET=gIB (the gIB image's set_nccl_env.sh;
# NCCL loads the shim libnccl-net.so from /usr/local/gib/lib64 on LD_LIBRARY_PATH, which loads the gIB transport), or
# NCCL_NET_PLUGIN=/usr/local/gib/lib64/libnccl-net_internal.so, the transport's own library named directly, as tutorial
# 002's runtime-env.yaml (esaaren/verl-on-gke job/runtime-env.yaml) does without NCCL_NET. So a user's NCCL_NET_PLUGIN
# replaces nbtools' NCCL_NET; both in trainer.env_vars is a lint finding (nbtools.launch.lint, rule "nccl-net").
NET_CHOICE = ("NCCL_NET", "NCCL_NET_PLUGIN")


def env_vars(cfg: Experiment, *, trainer: trainers.Trainer | None = None,
             backend: backends.Backend | None = None) -> dict[str, str]:
    """The job's ``runtime_env.env_vars`` for ``cfg`` (never secrets, on every backend): the cluster's own
    (NCCL/gIB on GKE), the trainer's, then ``trainer.env_vars``.

    Raises:
        ConfigError: ``trainer.env_vars`` holds a secret (HF_TOKEN, WANDB_API_KEY) or a token-shaped value; config
            validation reports the same, this guards configs built without it.
    """
    backend = backend or backends.get(cfg)
    return env_vars_for(cfg, trainer or trainers.get(cfg, backend), backend)


def env_vars_for(cfg: Experiment, trainer: trainers.Trainer, backend: backends.Backend) -> dict[str, str]:
    """:func:`env_vars` with the trainer and backend the caller resolved once."""
    _refuse_secrets(cfg.trainer.env_vars)
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1", **backend.job_env()}
    env.update(trainer.job_env())  # a cluster trainer's HF_HOME (the shared cache) included
    if "NCCL_NET_PLUGIN" in cfg.trainer.env_vars and "NCCL_NET" not in cfg.trainer.env_vars:
        env.pop("NCCL_NET", None)  # the user names the network library (tutorial 002): see NET_CHOICE
    env.update(cfg.trainer.env_vars)
    return env


def _refuse_secrets(extra: dict[str, str]) -> None:
    problems = []
    for name, value in extra.items():
        if name in SECRET_ENV_VARS:
            field = "wandb_api_key" if name == "WANDB_API_KEY" else "hf_token"
            problems.append(f"trainer.env_vars.{name}: secrets must not be job env vars (the Ray dashboard shows them); "
                            f"fix: remove it and set `secrets.{field}: {{env: {SECRET_ENV_NAMES[field]}}}`")
        elif (kind := token_kind(value, names=False)) or token_kind(name):
            shown = redact(name) if token_kind(name) else name
            problems.append(f"trainer.env_vars.{shown}: {redact(value)} looks like {kind or 'a token'}; job env vars are "
                            "shown on the Ray dashboard; fix: remove it and reference the secret by NAME under `secrets:`")
    if problems:
        raise ConfigError(problems)


def secret_values(cfg: Experiment, *, backend: backends.Backend | None = None) -> dict[str, Secret]:
    """Secrets the job needs from this machine's environment (the ``ray`` backend; on gke the pods hold them).

    Returns env-var name in the job -> Secret; a configured secret whose env var is unset is simply absent
    (``lint`` reports it).
    """
    return (backend or backends.get(cfg)).job_secrets()


def secrets_prelude() -> str:
    """The shell prefix that loads the uploaded secrets file into the job's environment and deletes it first."""
    return f"set -a && . ./{SECRETS_FILE} && set +a && rm -f ./{SECRETS_FILE} && "


def zip_working_dir(files: dict[str, bytes], secrets: dict[str, Secret] | None = None) -> bytes:
    """A working_dir package built in memory: ``files`` (path -> bytes) plus, if given, the secrets file."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in sorted(files.items()):
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
        if secrets:
            body = "".join(f"{name}={sh(s.reveal())}\n" for name, s in sorted(secrets.items()))
            info = zipfile.ZipInfo(SECRETS_FILE, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o600 << 16
            zf.writestr(info, body)
    return buf.getvalue()


def upload_working_dir(address: str, files: dict[str, bytes], secrets: dict[str, Secret] | None = None) -> str:
    """Upload a working_dir package to the cluster and return its ``gcs://`` URI for ``runtime_env``.

    Without secrets the package is named by its content hash (re-uploads are skipped, like Ray's own upload);
    with secrets it gets a random name so no cached copy (whose secrets file the previous job deleted) is reused
    and the name reveals nothing about the content.
    """
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as e:  # pragma: no cover - ray is a dependency
        raise DependencyError("ray is not installed", fix="pip install 'ray[default]'") from e
    blob = zip_working_dir(files, secrets)
    name = uuid.uuid4().hex if secrets else hashlib.sha1(blob).hexdigest()
    package = f"_ray_pkg_{name}.zip"
    uri = f"gcs://{package}"
    client = JobSubmissionClient(address)
    if not secrets and client._do_request("GET", f"/api/packages/gcs/{package}").status_code == 200:
        return uri
    r = client._do_request("PUT", f"/api/packages/gcs/{package}", data=blob)
    if r.status_code != 200:
        raise NbtoolsError(
            f"uploading the job's working_dir to {address} failed with HTTP {r.status_code}",
            fix="check that the address is the Ray dashboard (port 8265) and that the package is under 100 MiB",
        )
    return uri

