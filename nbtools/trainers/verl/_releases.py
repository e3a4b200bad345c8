"""The verl releases nbtools can run (``trainer.verl_ref``): adding one is one entry in ``VERL``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VerlRelease", "VERL"]


@dataclass(frozen=True)
class VerlRelease:
    """What differs between verl releases for a GRPO job (``trainer.verl_ref``, a tag of verl-project/verl).

    Every release runs the same way (source placement): the provisioning plan copies the tag's tree to
    ``<mount>/verl`` and the job runs ``cd <mount>/verl && python3 -m <module>`` with that directory on PYTHONPATH,
    because verl's images carry its dependencies but not verl itself (docker/Dockerfile.stable.vllm at both tags:
    ``pip install git+...verl.git@<tag> && pip uninstall -y verl``).

    Attributes:
        version: the release tag.
        commit: the tag's commit (what the key table was read from).
        module: the Hydra entry point (``@hydra.main(config_path="config", config_name="ppo_trainer")``); its config
            is struct, so ``key=value`` needs a key of the release's composed config (``nbtools/data/verl_keys_<tag>.json``,
            from the tag's verl/trainer/config/_generated_ppo_trainer.yaml) and ``+key=value`` one it lacks.
        trainer: which trainer ``module`` runs by default: v0.7.0's main_ppo.py runs its TaskRunner (RayPPOTrainer);
            v0.9.0's runs TaskRunnerV1 (verl/trainer/ppo/v1) while ``trainer.use_v1: true`` (ppo_trainer.yaml), the
            legacy one (main_ppo_v0.py) only with ``trainer.use_v1=false``, with a deprecation warning.
        imports: modules the default trainer imports that only some images have: v0.9.0's TaskRunnerV1.run does
            ``import transfer_queue as tq`` (requirements.txt TransferQueue==0.1.8).
        vllm: the vLLM versions the release supports (setup.py VLLM_REQUIRES), as (lowest, highest or "").
        ray: the lowest Ray (setup.py ``ray[default]>=``).
        image: the image the release's CI runs (.github/workflows/*.yml IMAGE; docker/Dockerfile.stable.vllm).
    """

    version: str
    commit: str
    module: str = "verl.trainer.main_ppo"
    trainer: str = "RayPPOTrainer (main_ppo.py TaskRunner)"
    imports: tuple[str, ...] = ()
    vllm: tuple[str, str] = ("0.8.5", "")
    ray: str = "2.41.0"
    image: str = ""


# verl (verl-project/verl): GRPO is main_ppo with algorithm.adv_estimator=grpo at both tags.
VERL: dict[str, VerlRelease] = {r.version: r for r in (
    VerlRelease("v0.7.0", "f9c855f7cf04d603c9546bc01776c74806a879c1", vllm=("0.8.5", "0.12.0"),
                image="verlai/verl:vllm012.latest"),
    # v0.8.0 deprecated main_ppo.py for main_ppo_sync.py; v0.9.0 folded that back: main_ppo.py again, V1 by default
    VerlRelease("v0.9.0", "483b8a009ba3a97563edee3a19887e4862b8094a",
                trainer="TaskRunnerV1 (verl/trainer/ppo/v1, trainer.use_v1: true)", imports=("transfer_queue",),
                vllm=("0.18.0", ""), image="verlai/verl:vllm024.dev2"),
)}
