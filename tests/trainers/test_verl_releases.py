"""verl per release (issue 28 item 1): the VERL table's entries, each with the trainer config of its tag, and a lint
that refuses what that release's Hydra config refuses.

Upstream facts (verl-project/verl): v0.7.0 = f9c855f7, v0.9.0 = 483b8a00; both run ``verl.trainer.main_ppo``
(``@hydra.main(config_name="ppo_trainer")``); v0.9.0's runs TaskRunnerV1 by default (``trainer.use_v1: true``,
ppo_trainer.yaml) and requires vllm>=0.18.0 (setup.py); v0.7.0's requires vllm>=0.8.5,<=0.12.0. The key tables are
verl's own ``verl/trainer/config/_generated_ppo_trainer.yaml`` at each tag (tests/assets/verl/<tag>/SOURCE.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_tools import load_tool

from nbtools import config, trainers
from nbtools.launch import lint
from nbtools.trainers import verl
from nbtools.trainers.verl import VERL
from nbtools.trainers.verl import _tree as _verl_tree

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests" / "assets" / "verl"
IMAGES = {"v0.7.0": "verlai/verl:vllm011.latest", "v0.9.0": "verlai/verl:vllm024.dev2"}


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))


def _cfg(ref: str = "v0.7.0", **over) -> config.Experiment:
    cfg = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke")
    return cfg.replace(**{"trainer.verl_ref": ref, "images.image": IMAGES.get(ref, cfg.images.image), **over})


def _rule(cfg, rule):
    rep = lint(cfg, existing_steps=[], client_ray_version=cfg.images.resolved_ray_version,
               cluster_gpus=cfg.cluster.total_gpus, code_present=True, ignore_fit=True)
    assert rule in rep.checked
    return [f for f in rep.findings if f.rule == rule]


def test_package_key_tables_are_the_tags_configs():
    files = load_tool("gen_verl_keys").generate(ASSETS)
    assert set(files) == {f"verl_keys_{v}.json" for v in VERL}  # one table per release entry, no table without one
    for name, text in files.items():
        assert (ROOT / "nbtools" / "data" / name).read_text() == text, f"{name} is stale: run tools/gen_verl_keys.py"
        data = json.loads(text)
        assert data["commit"] == VERL[data["version"]].commit
    assert _verl_tree.known_releases() == sorted(VERL)


def test_each_release_runs_its_entry_point_and_names_its_tag():
    for ref in VERL:
        t = trainers.get(_cfg(ref))
        assert t.job().command.startswith(f"cd /data/verl && python3 -m {VERL[ref].module} ")
        assert (t.release, t.version()) == (ref, ref)
    v9 = _verl_tree.verl_tree("v0.9.0")
    assert v9["trainer"]["use_v1"] is True and "use_v1" not in _verl_tree.verl_tree("v0.7.0")["trainer"]


@pytest.mark.parametrize("ref", sorted(VERL))
def test_the_tutorial_settings_are_keys_of_both_releases(ref):
    assert _rule(_cfg(ref), "verl-keys") == []
    assert _rule(_cfg(ref), "verl-image") == []


def test_a_key_of_one_release_is_refused_on_the_other():
    # trainer.use_v1 is new in v0.9.0; rollout.update_weights_bucket_megabytes is gone from it
    old = _rule(_cfg("v0.7.0", **{"trainer.overrides": ["trainer.use_v1=false"]}), "verl-keys")
    assert [(f.severity, f.key) for f in old] == [("blocking", "trainer.overrides[0]")]
    assert "not a key of verl v0.7.0's trainer config (it is one in v0.9.0)" in old[0].message
    assert "Could not override 'trainer.use_v1'" in old[0].message and "+trainer.use_v1=false" in old[0].fix
    over = {"trainer.overrides": ["actor_rollout_ref.rollout.update_weights_bucket_megabytes=512"]}
    assert _rule(_cfg("v0.7.0", **over), "verl-keys") == []
    new = _rule(_cfg("v0.9.0", **over), "verl-keys")
    assert len(new) == 1 and "(it is one in v0.7.0)" in new[0].message


def test_plus_on_an_existing_key_and_a_typo_are_refused():
    found = _rule(_cfg("v0.9.0", **{"trainer.overrides": [
        "+trainer.total_epochs=3", "actor_rollout_ref.rollout.gpu_memory_utilisation=0.5", "++trainer.total_epochs=3",
        "+trainer.my_note=x", "~trainer.nope"]}), "verl-keys")
    assert [f.key for f in found] == ["trainer.overrides[0]", "trainer.overrides[1]", "trainer.overrides[4]"]
    assert "Hydra refuses `+`" in found[0].message and found[0].fix.startswith("write `trainer.total_epochs=3`")
    assert "did you mean `actor_rollout_ref.rollout.gpu_memory_utilization`?" in found[1].fix


def test_an_unknown_tag_is_said_unchecked():
    found = _rule(_cfg("v0.6.1", **{"trainer.overrides": ["trainer.nope=1"]}), "verl-keys")
    assert [(f.severity, f.key) for f in found] == [("warning", "trainer.verl_ref")]
    assert "no key table for verl 'v0.6.1'" in found[0].message and "v0.7.0, v0.9.0" in found[0].fix


@pytest.mark.parametrize("ref", sorted(VERL))
def test_the_lint_agrees_with_hydra_on_the_real_config(ref, tmp_path):
    """Real Hydra (compose, struct mode as @hydra.main) over the tag's config: what it refuses is what we block."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    cases = ["trainer.use_v1=false", "+trainer.use_v1=false", "++trainer.use_v1=false", "trainer.nnodes=4",
             "+trainer.nnodes=4", "+trainer.brand_new=1", "reward_model.micro_batch_size_per_gpu=2",
             "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4", "~trainer.nope", "~trainer.nnodes",
             "custom_reward_function.path=/data/r.py", "+custom_reward_function.path=/data/r.py"]
    with initialize_config_dir(config_dir=str(ASSETS / ref / "verl/trainer/config"), version_base=None):
        for case in cases:
            try:
                compose(config_name="_generated_ppo_trainer", overrides=[case])
                hydra_ok = True
            except ConfigCompositionException:
                hydra_ok = False
            ours = _rule(_cfg(ref, **{"trainer.overrides": [case]}), "verl-keys")
            assert (not ours) == hydra_ok, (ref, case, ours)


def test_an_image_built_for_another_release_is_refused():
    # the tutorial's image (vLLM 0.11, no TransferQueue) under v0.9.0's V1 trainer
    found = _rule(_cfg("v0.9.0", **{"images.image": "verlai/verl:vllm011.latest"}), "verl-image")
    assert [(f.severity, f.key) for f in found] == [("blocking", "images.image")]
    assert "vLLM 0.11, and verl v0.9.0 requires vllm>=0.18.0" in found[0].message
    assert "imports transfer_queue" in found[0].message and "verlai/verl:vllm024.dev2" in found[0].fix
    back = _rule(_cfg("v0.7.0", **{"images.image": "verlai/verl:vllm024.dev2"}), "verl-image")
    assert len(back) == 1 and "requires vllm>=0.8.5,<=0.12.0" in back[0].message
    assert _rule(_cfg("v0.9.0", **{"images.image": "my-registry/verl-custom:1"}), "verl-image") == []  # can't tell
    old_ray = _rule(_cfg("v0.9.0", **{"images.ray_version": "2.40.0"}), "verl-image")
    assert [f.key for f in old_ray] == ["images.ray_version"] and ">=2.41.0" in old_ray[0].message


def test_command_of_an_unknown_tag_uses_the_newest_entry_point():
    assert verl.release(_cfg("v0.6.1")) is VERL[list(VERL)[-1]] and not verl.known_release(_cfg("v0.6.1"))
