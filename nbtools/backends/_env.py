"""What a backend adds to its jobs' environment: GKE's NCCL/gIB variables, the secrets this machine delivers.

Why here: the backends build their jobs' env (``Backend.job_env`` / ``job_secrets``) and ``nbtools.launch`` assembles
it from them; kept below both, the backends import nothing of launch (layers, issue 43).
"""

from __future__ import annotations

from nbtools.config import Experiment, Secret

__all__ = ["SECRET_ENV_NAMES", "gib_nccl_env", "secrets_from_env"]

SECRET_ENV_NAMES = {"hf_token": "HF_TOKEN", "wandb_api_key": "WANDB_API_KEY"}

# NCCL over Google's gIB plugin on A4 (B200) / A3 Ultra (H200) with RDMA: the variables of the gIB image's
# /usr/local/gib/scripts/set_nccl_env.sh as GKE's NCCL RDMA guidance and recipes set them (NCCL_NET=gIB, the RoCE
# traffic classes, the GPU type's tuner file). They are set in ONE place, the job's runtime_env: NeMo-RL forwards the
# driver's environment to every actor and verl's actors inherit the job's. LD_LIBRARY_PATH is appended to, never
# replaced: Ray expands ``${LD_LIBRARY_PATH}`` in runtime_env env_vars against the process's own value (ray
# ``_private/utils.update_envs``), so the image's paths (CUDA, NeMo-RL's) stay in front.
_GIB_NCCL = {
    "NCCL_NET": "gIB",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_NET_CHUNKSIZE": "131072",
    "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "52",
    "NCCL_IB_FIFO_TC": "84",
    "GLOO_SOCKET_IFNAME": "eth0",  # not NCCL: torch's Gloo bootstrap on the pod network (tutorial 002's runtime env)
    "LD_LIBRARY_PATH": "${LD_LIBRARY_PATH}:/usr/local/gib/lib64:/usr/local/nvidia/lib64",
}


def gib_nccl_env(tuner_config: str) -> dict[str, str]:
    """NCCL/gIB variables for a GKE A4 / A3 Ultra node, with the GPU type's tuner file (the only place they are set).

    Example:
        >>> gib_nccl_env("/usr/local/gib/configs/tuner_config_a4.txtpb")["NCCL_NET"]
        'gIB'
    """
    return {**_GIB_NCCL, "NCCL_TUNER_CONFIG_PATH": tuner_config}


def secrets_from_env(cfg: Experiment) -> dict[str, Secret]:
    """Every configured secret whose env var is set here, keyed by its env-var name in the job."""
    out: dict[str, Secret] = {}
    for field_name, job_name in SECRET_ENV_NAMES.items():
        ref = getattr(cfg.secrets, field_name)
        if ref is None or not ref.env:
            continue
        value = ref.value()
        if value is not None:
            out[job_name] = value
    return out
