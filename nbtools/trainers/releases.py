"""The releases of each trainer nbtools can run: adding one is one entry here.

The cluster image and its Ray pin of a NeMo-RL release are the config's (``config.NEMO_RL_VERSIONS``: the manifests
derive the pods from them); what the trainer itself does differently per release is here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NemoRlRelease", "VerlRelease", "NEMO_RL", "VERL"]


@dataclass(frozen=True)
class NemoRlRelease:
    """What differs between NeMo-RL releases for a GRPO job.

    Attributes:
        version: the release tag (``images.nemo_rl_version``).
        entrypoint: the GRPO script, relative to the checkout.
        reward_entrypoint: the GRPO script that honours a reward environment (``trainer.reward_functions``), where it
            differs from ``entrypoint``.
    """

    version: str
    entrypoint: str
    reward_entrypoint: str | None = None


@dataclass(frozen=True)
class VerlRelease:
    """What differs between verl releases for a GRPO job (``trainer.verl_ref``)."""

    version: str
    module: str = "verl.trainer.main_ppo"


# NeMo-RL (NVIDIA-NeMo/RL): examples/run_grpo_math.py up to v0.5.x, examples/run_grpo.py from v0.6 on.
NEMO_RL: dict[str, NemoRlRelease] = {r.version: r for r in (
    NemoRlRelease("v0.5.0", "examples/run_grpo_math.py"),
    NemoRlRelease("v0.7.0", "examples/run_grpo.py"),
)}

# verl (verl-project/verl): main_ppo with algorithm.adv_estimator=grpo (v0.7.0 verl/trainer/main_ppo.py).
VERL: dict[str, VerlRelease] = {r.version: r for r in (
    VerlRelease("v0.7.0"),
)}
