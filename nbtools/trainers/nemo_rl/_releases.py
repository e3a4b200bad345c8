"""The NeMo-RL releases nbtools can run (``images.nemo_rl_version``): adding one is one entry in ``NEMO_RL`` (and its
tag in the config's ``images.nemo_rl_version`` values).

Each entry holds the release's cluster image, Ray pin and torch (``images.resolved_image`` and
``resolved_ray_version`` read them through ``release_facts``: the manifests derive the pods from them) and what the
trainer itself does differently per release.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NemoRlRelease", "NEMO_RL", "release_facts"]


@dataclass(frozen=True)
class NemoRlRelease:
    """What differs between NeMo-RL releases for a GRPO job.

    Attributes:
        version: the release tag (``images.nemo_rl_version``).
        entrypoint: the GRPO script, relative to the checkout.
        reward_entrypoint: the GRPO script that honours a reward environment (``trainer.reward_functions``), where it
            differs from ``entrypoint``: v0.5.0's examples/run_grpo_math.py builds MathEnvironment itself and never
            reads data.env_name; its examples/run_grpo.py calls create_env(env_name=data_config["env_name"], ...)
            (NVIDIA-NeMo/RL v0.5.0, both files).
        val_dumps: writes ``<log_dir>/exp_NNN/val_data_step{N}.jsonl`` (nbtools.trajectories, notebook 05's validation
            view): v0.5.0's nemo_rl/algorithms/grpo.py calls log_batched_dict_as_jsonl only for train_data_step{N},
            v0.7.0's also for val_data_step{step} (grpo.py, validate).
        baseline_reward: logs ``train/baseline_reward/pct_0|pct_1|pct_mixed`` (nbtools.metrics' ``no_signal``):
            v0.7.0's grpo.py only.
        image: the container image the cluster runs (``images.image`` overrides it).
        ray: the Ray the release pins (its uv.lock; ``images.ray_version`` overrides it).
        torch: the torch of that image.
        data_validation: reads a ``data.validation`` section: v0.7.0's data config has data.train / data.validation /
            data.default (examples/configs/grpo_math_1B.yaml); v0.5.0's is flat (dataset_name, and val_data_path for
            a ResponseDataset), so a data.validation override would be dropped.
    """

    version: str
    entrypoint: str
    reward_entrypoint: str | None = None
    val_dumps: bool = True
    baseline_reward: bool = True
    data_validation: bool = True
    image: str = ""
    ray: str = ""
    torch: str = ""


# NeMo-RL (NVIDIA-NeMo/RL): examples/run_grpo_math.py up to v0.5.x, examples/run_grpo.py from v0.6 on.
NEMO_RL: dict[str, NemoRlRelease] = {r.version: r for r in (
    NemoRlRelease("v0.5.0", "examples/run_grpo_math.py", reward_entrypoint="examples/run_grpo.py",
                  val_dumps=False, baseline_reward=False, data_validation=False,
                  image="nvcr.io/nvidia/nemo-rl:v0.5.0", ray="2.49.2", torch="2.9.0"),
    NemoRlRelease("v0.7.0", "examples/run_grpo.py", image="nvcr.io/nvidia/nemo-rl:v0.7.0", ray="2.55.1", torch="2.11.0"),
)}


def release_facts(version: str) -> dict[str, str]:
    """The cluster image, Ray pin and torch of ``images.nemo_rl_version`` (what the config's ``resolved_image`` and
    ``resolved_ray_version`` default to)."""
    r = NEMO_RL[version]
    return {"image": r.image, "ray": r.ray, "torch": r.torch}
