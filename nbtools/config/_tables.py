"""Version and hardware tables the config derives values from (each row names where it was checked)."""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_TRAINER", "GPU_TYPES", "GPU_DRIVER_VERSIONS", "NCCL_INSTALLER_REF", "VERL_REPO", "VERL_REF"]

# GPU type -> (GCE machine type, NCCL tuner config on the gIB image, GPUs per node, the oldest GKE version for it:
# Google's tutorial "Fine-tune ... with NeMo RL on GKE" (tutorial 001), GKE_VERSION: "For NVIDIA B200 (180 GB) GPUs,
# use 1.32.2-gke.1422000 or later. For NVIDIA H200 (141 GB) GPUs, use 1.31.4-gke.1183000 or later")
GPU_TYPES: dict[str, dict[str, Any]] = {
    "nvidia-b200": {
        "machine_type": "a4-highgpu-8g",
        "nccl_tuner_config": "/usr/local/gib/configs/tuner_config_a4.txtpb",
        "gpus_per_node": 8,
        "min_gke_version": "1.32.2-gke.1422000",
    },
    "nvidia-h200-141gb": {
        "machine_type": "a3-ultragpu-8g",
        "nccl_tuner_config": "/usr/local/gib/configs/tuner_config_a3u.txtpb",
        "gpus_per_node": 8,
        "min_gke_version": "1.31.4-gke.1183000",
    },
}


def gke_version_parts(version: str) -> tuple[int, ...] | None:
    """``1.32.2-gke.1422000`` -> (1, 32, 2, 1422000); ``1.33`` -> (1, 33); None for ``latest`` or a non-version."""
    import re

    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+)(?:-gke\.(\d+))?)?", version.strip())
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def gke_version_too_old(version: str, gpu_type: str) -> str | None:
    """The minimum ``version`` misses for ``gpu_type`` (None when it is new enough, partial-but-compatible such as
    ``1.32``, ``latest``, or not a version at all: gcloud judges those)."""
    need = GPU_TYPES.get(gpu_type, {}).get("min_gke_version")
    have, floor = gke_version_parts(version), gke_version_parts(need) if need else None
    if have is None or floor is None:
        return None
    return need if have < floor[:len(have)] or (len(have) == len(floor) and have < floor) else None


# What `trainer.kind` holds when the file says nothing (nbtools.trainers registers the names a file may use).
DEFAULT_TRAINER = "nemo-rl"

# A NeMo-RL release's container image, pinned Ray and torch are its trainer folder's (nbtools/trainers/nemo_rl/
# _releases.py); ``images.resolved_image`` asks them through ``_contrib`` (``CONTRIBUTIONS.release_facts``).


# `gcloud container node-pools create --accelerator=...,gpu-driver-version=` values (gcloud 528 --help); omitting the
# key means `disabled`: no NVIDIA driver on the node and no GPU for any pod.
GPU_DRIVER_VERSIONS = ("latest", "default", "disabled")

# GoogleCloudPlatform/container-engine-accelerators commit whose gpudirect-rdma/nccl-rdma-installer{,-autopilot}.yaml
# the plan applies: 2da1c92f (2026-05-06, the newest change to both files): gIB plugin image nccl-plugin-gib:v1.1.1
# (was v1.0.6 at 2c776f7e, 2025-07-01; v1.1.0 came in 209d1af0), `container_entry.sh install` without
# `--install-nccl` (commit "Removed --install-nccl from default and a4x installers": the node gets the gIB net plugin
# and its tuner configs, and jobs use the NCCL their image ships, here PyTorch's), and no `disable-log-martian`
# init container. The hostPaths (/home/kubernetes/bin/gib, .../nvidia/lib64) and the tuner files the Ray workers read
# (/usr/local/gib/configs/tuner_config_a4.txtpb, _a3u) are unchanged; Google's nccl-test-a4.yaml at that commit uses
# the v1.1.1 diagnostic image with the same LD_LIBRARY_PATH and set_nccl_env.sh.
NCCL_INSTALLER_REF = "2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae"

# The verl source tutorial 002 runs from the shared mount (`cd /data/verl`): a pinned release of the project's repo.
VERL_REPO = "https://github.com/verl-project/verl"
VERL_REF = "v0.7.0"
