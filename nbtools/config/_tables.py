"""Version and hardware tables the config derives values from (each row names where it was checked)."""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_TRAINER", "GPU_TYPES", "NEMO_RL_VERSIONS", "GPU_DRIVER_VERSIONS", "NCCL_INSTALLER_REF", "VERL_REPO", "VERL_REF"]

# GPU type -> (GCE machine type, NCCL tuner config on the gIB image, GPUs per node)
GPU_TYPES: dict[str, dict[str, Any]] = {
    "nvidia-b200": {
        "machine_type": "a4-highgpu-8g",
        "nccl_tuner_config": "/usr/local/gib/configs/tuner_config_a4.txtpb",
        "gpus_per_node": 8,
    },
    "nvidia-h200-141gb": {
        "machine_type": "a3-ultragpu-8g",
        "nccl_tuner_config": "/usr/local/gib/configs/tuner_config_a3u.txtpb",
        "gpus_per_node": 8,
    },
}

# What `trainer.kind` holds when the file says nothing (nbtools.trainers registers the names a file may use).
DEFAULT_TRAINER = "nemo-rl"

# NeMo-RL release -> pinned Ray (uv.lock), container image, torch (the cluster's image); the trainer's own facts per
# release (entry point, ...) are in nbtools/trainers/releases.py
NEMO_RL_VERSIONS: dict[str, dict[str, str]] = {
    "v0.5.0": {
        "ray": "2.49.2",
        "image": "nvcr.io/nvidia/nemo-rl:v0.5.0",
        "torch": "2.9.0",
    },
    "v0.7.0": {
        "ray": "2.55.1",
        "image": "nvcr.io/nvidia/nemo-rl:v0.7.0",
        "torch": "2.11.0",
    },
}


# `gcloud container node-pools create --accelerator=...,gpu-driver-version=` values (gcloud 528 --help); omitting the
# key means `disabled`: no NVIDIA driver on the node and no GPU for any pod.
GPU_DRIVER_VERSIONS = ("latest", "default", "disabled")

# GoogleCloudPlatform/container-engine-accelerators commit whose gpudirect-rdma/nccl-rdma-installer{,-autopilot}.yaml
# (gIB plugin image nccl-plugin-gib:v1.0.6, nvidia-b200 + nvidia-h200-141gb) the plan applies.
NCCL_INSTALLER_REF = "2c776f7e9656a2b6476f19938b738b4186000ce3"

# The verl source tutorial 002 runs from the shared mount (`cd /data/verl`): a pinned release of the project's repo.
VERL_REPO = "https://github.com/verl-project/verl"
VERL_REF = "v0.7.0"
