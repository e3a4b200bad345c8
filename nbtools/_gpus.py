"""GPU memory capacities, one table (below the backends, which check a configured GPU against it, and the fit): names users type, GKE accelerator names, and what the CUDA driver reports.

Why: a verdict is only as good as the capacity it is held against. The numbers are the total memory the driver
reports (``nvidia-smi``'s "Total", in MiB), not the marketing GB: an "80 GB" H100 has 79.6 GiB, a "141 GB" H200
140.4 GiB, a "180 GB" B200 179.1 GiB.

Example:
    >>> gpu_spec("nvidia-h200-141gb").gib
    140.4
"""

from __future__ import annotations

from dataclasses import dataclass

from nbtools.errors import ConfigError

__all__ = ["GpuSpec", "GPUS", "gpu_spec", "gpu_type_rules"]


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type: ``mib`` is the total memory its driver reports."""

    key: str
    label: str
    mib: int

    @property
    def gib(self) -> float:
        return round(self.mib / 1024, 2)


GPUS: dict[str, GpuSpec] = {g.key: g for g in (
    GpuSpec("b200", "NVIDIA B200 (180 GB HBM3e)", 183359),
    GpuSpec("h200", "NVIDIA H200 (141 GB HBM3e)", 143771),
    GpuSpec("h100", "NVIDIA H100 80GB HBM3", 81559),
    GpuSpec("h100-nvl", "NVIDIA H100 NVL (94 GB)", 95830),
    GpuSpec("a100-80", "NVIDIA A100 80GB", 81920),
    GpuSpec("a100-40", "NVIDIA A100 40GB", 40960),
    GpuSpec("l40s", "NVIDIA L40S (48 GB)", 46068),
    GpuSpec("l4", "NVIDIA L4 (24 GB)", 23034),
    GpuSpec("a10g", "NVIDIA A10G (24 GB)", 23028),
    GpuSpec("a10", "NVIDIA A10 (24 GB)", 23028),
    GpuSpec("a40", "NVIDIA A40 (48 GB)", 46068),
    GpuSpec("l40", "NVIDIA L40 (48 GB)", 46068),
    GpuSpec("t4", "NVIDIA T4 (16 GB)", 15360),
)}

_ALIASES = {  # GKE accelerator names (cluster.gpu_type) and common spellings
    "nvidia-b200": "b200", "nvidia-h200-141gb": "h200", "nvidia-h200": "h200", "nvidia-h100-80gb": "h100",
    "nvidia-h100-mega-80gb": "h100", "nvidia-a100-80gb": "a100-80", "nvidia-tesla-a100": "a100-40",
    "nvidia-l4": "l4", "a100": "a100-80", "a100-80gb": "a100-80", "a100-40gb": "a100-40", "h100-80gb": "h100",
    "h200-141gb": "h200", "nvidia-l40s": "l40s", "nvidia-a10g": "a10g", "nvidia-tesla-t4": "t4", "nvidia-a10": "a10",
    "nvidia-a40": "a40", "nvidia-l40": "l40", "h100-sxm": "h100", "h100-pcie": "h100", "a100-sxm4-80gb": "a100-80",
    "a100-sxm4-40gb": "a100-40",
}


def gpu_spec(name: str | GpuSpec) -> GpuSpec:
    """The :class:`GpuSpec` for a short name (``h200``), a GKE accelerator (``nvidia-h200-141gb``) or ``<N>gib``.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    if isinstance(name, GpuSpec):
        return name
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    if key.endswith("gib"):
        try:
            return GpuSpec(key, f"a GPU of {key[:-3]} GiB", int(float(key[:-3]) * 1024))
        except ValueError:
            pass
    raise ConfigError(
        f"unknown GPU type {name!r}; known: {', '.join(GPUS)} (and GKE names {', '.join(sorted(_ALIASES))}); "
        "fix: use one of those, or give the memory directly, e.g. '96gib'"
    )


def gpu_type_rules(cfg) -> list[tuple[tuple[str, ...], str]]:
    """``cluster.gpu_type`` of a cluster nbtools did not make: a GPU of this table, or its memory (``<N>gib``), so the
    fit check holds the run against the right capacity. The ``ray`` and ``local`` backends' ``check`` (part of
    ``config.load``'s report) asks it; the gke backend checks its own list (the machines it provisions)."""
    try:
        gpu_spec(cfg.cluster.gpu_type)
    except ConfigError:
        return [(("cluster.gpu_type",),
                 f"cluster.gpu_type: {cfg.cluster.gpu_type!r} is not a GPU whose memory nbtools knows; allowed: "
                 f"{', '.join(GPUS)}, their GKE names ({', '.join(sorted(_ALIASES))}), or the memory per GPU as "
                 "'<N>gib'; fix: e.g. `gpu_type: a100-80`, or `gpu_type: 96gib` for another GPU")]
    return []
