"""The verl checkout of the simulated cluster: the test double of ``verl.trainer.main_ppo`` (tests/doubles/sim_verl) with the
tag's own trainer config and version file, as the provisioning plan puts a release at ``<mount>/verl``.

Per tag: ``verl/version/version`` holds the version (``0.9.0``, as at the tag), ``verl/trainer/config/ppo_trainer.yaml``
is the tag's ``_generated_ppo_trainer.yaml`` (tests/assets/verl/<tag>/, see its SOURCE.md): the composed config that
Hydra hands main_ppo. ``transfer_queue_image`` writes the image-side package verl v0.9.0's V1 trainer imports.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DOUBLES = Path(__file__).resolve().parent
ASSETS = TESTS / "assets" / "verl"

__all__ = ["write_verl_checkout", "transfer_queue_image", "write_hub_copy"]


def write_verl_checkout(dest: str | Path, tag: str, *, rehearsal_config: str | Path | None = None) -> Path:
    """Write the stand-in checkout of verl ``tag`` at ``dest`` (replacing it) and return ``dest``.

    With ``rehearsal_config`` (a local-backend experiment whose ``trainer.kind`` is verl: the simulated image's tiny
    model and task), the double trains; without it, it only checks commands (``VERL_SIM_CONFIG_ONLY=1``).
    """
    dest = Path(dest)
    config = ASSETS / tag / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    if not config.is_file():
        raise FileNotFoundError(f"no trainer config for verl {tag} under {ASSETS}: copy the tag's "
                                "verl/trainer/config/_generated_ppo_trainer.yaml there (with a SOURCE.md)")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(DOUBLES / "sim_verl", dest, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "verl" / "trainer" / "config").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, dest / "verl" / "trainer" / "config" / "ppo_trainer.yaml")
    (dest / "verl" / "version").mkdir(parents=True, exist_ok=True)
    (dest / "verl" / "version" / "version").write_text(tag.removeprefix("v") + "\n")
    if rehearsal_config is not None:
        (dest / "sim_gke.json").write_text(json.dumps({"nbtools_root": str(TESTS.parent),
                                                       "rehearsal_config": str(rehearsal_config)}))
    return dest


def transfer_queue_image(dest: str | Path) -> Path:
    """A site dir holding a ``transfer_queue`` package: what verl's v0.9.0 image has (docker/Dockerfile.stable.vllm
    at v0.9.0: ``pip install --no-deps TransferQueue==0.1.8``) and the v0.7.0 images lack. TEST DOUBLE: empty."""
    site = Path(dest)
    (site / "transfer_queue").mkdir(parents=True, exist_ok=True)
    (site / "transfer_queue" / "__init__.py").write_text('"""TEST DOUBLE of TransferQueue (the image\'s package)."""\n')
    return site


HUB_REVISION = "0" * 39 + "1"  # the stand-in Hub copy's commit (refs/main)


def write_hub_copy(hf_home: str | Path, repo_id: str, rehearsal_config: str | Path) -> Path:
    """The Hub's copy of ``repo_id`` as the sim's pods find it in the shared HF cache (huggingface_hub's layout:
    ``hub/models--ORG--NAME/refs/main`` naming a snapshot dir): the simulated image's tiny model, built and
    warm-started (the rehearsal's format SFT, one process) as an instruct model would come, with its tokenizer.

    A STAND-IN for the Hub: the sim's pods reach none (``HF_HUB_OFFLINE=1``), so the weights job's
    ``snapshot_download`` finds this copy as staged and vLLM's double loads the baseline from it. Returns the snapshot dir.
    """
    import sys

    sys.path.insert(0, str(TESTS.parent))
    from nbtools.config import load
    from nbtools.rehearsal import _grpo, model, task

    cfg = load(rehearsal_config, backend="local")
    tok = model.build_tokenizer()
    m = model.build_model(cfg, tok)
    train, _ = task.make_split(cfg)
    r = cfg.rehearsal
    _grpo.warm_start(m, train, steps=r.warmup_steps, lr=r.warmup_lr, batch=64, seed=cfg.grpo.seed, think=r.warmup_think)
    repo = Path(hf_home) / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / HUB_REVISION
    model.save_hf(m.eval(), tok, snap)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(HUB_REVISION)
    return snap
