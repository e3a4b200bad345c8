"""The NeMo-RL config trees the package carries match NeMo-RL's real v0.5.0 / v0.7.0 files, and the tree logic
(``defaults:`` inheritance, ``_override_``, key look-ups) behaves like NeMo-RL's ``load_config``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from nbtools.trainers import _tree

ROOT = Path(__file__).resolve().parents[2]
NEMO_RL = ROOT / "tests" / "assets" / "nemo-rl"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_nemo_rl_keys", ROOT / "tools" / "gen_nemo_rl_keys.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_package_data_matches_the_real_configs():
    files = _generator().generate(NEMO_RL)
    assert set(files) == {"nemo_rl_keys_v0.5.0.json", "nemo_rl_keys_v0.7.0.json"}
    for name, text in files.items():
        committed = (ROOT / "nbtools" / "data" / name).read_text()
        assert committed == text, f"{name} is stale: run .venv/bin/python tools/gen_nemo_rl_keys.py"
        data = json.loads(text)
        assert len(data["commit"]) == 40


@pytest.mark.parametrize("version", ["v0.5.0", "v0.7.0"])
def test_every_real_config_is_carried(version):
    on_disk = {p.relative_to(NEMO_RL / version).as_posix() for p in (NEMO_RL / version / "examples/configs").rglob("*.yaml")}
    grpo = {p for p in on_disk if "/evals/" not in p}
    assert set(_tree.known_configs(version)) == grpo


def test_defaults_chain_is_resolved_two_levels_deep():
    # 8n4g inherits 8n8g, which inherits grpo_math_1B: keys from all three levels, last one wins.
    tree = _tree.config_tree("v0.5.0", "examples/configs/recipes/llm/grpo-gemma3-27b-it-8n4g-fsdp2tp4-actckpt-long.yaml")
    assert _tree.get_value(tree, "cluster.gpus_per_node") == 4  # the child
    assert _tree.get_value(tree, "policy.model_name") == "google/gemma-3-27b-it"  # the parent
    assert _tree.has_key(tree, "loss_fn.reference_policy_kl_penalty")  # the grandparent
    assert "defaults" not in tree


def test_schema_differences_between_releases():
    v5 = _tree.config_tree("v0.5.0", "examples/configs/grpo_math_1B.yaml")
    v7 = _tree.config_tree("v0.7.0", "examples/configs/grpo_math_1B.yaml")
    assert _tree.has_key(v5, "data.dataset_name") and not _tree.has_key(v5, "data.train")
    assert _tree.has_key(v7, "data.train.dataset_name") and not _tree.has_key(v7, "data.dataset_name")
    assert _tree.has_key(v7, "data.validation") and _tree.get_value(v7, "data.validation") is None
    assert _tree.config_tree("v0.5.0", "examples/configs/grpo_smoke.yaml") is None


def test_override_marker_replaces_instead_of_merging(tmp_path):
    (tmp_path / "base.yaml").write_text("a:\n  x: 1\n  y: 2\nb: {k: 1}\n")
    (tmp_path / "child.yaml").write_text("defaults: base.yaml\na:\n  _override_: true\n  z: 3\nb: {j: 2}\n")
    tree = _tree.load_yaml_tree(tmp_path / "child.yaml")
    assert tree == {"a": {"z": 3}, "b": {"k": 1, "j": 2}}


def test_interpolations_are_followed_and_close_keys_suggested():
    tree = _tree.config_tree("v0.7.0", "examples/configs/grpo_math_1B.yaml")
    assert _tree.get_value(tree, "policy.tokenizer.name") == _tree.get_value(tree, "policy.model_name")
    assert _tree.closest_keys(tree, "grpo.max_num_step") == ["grpo.max_num_steps"]
    assert _tree.closest_keys(tree, "policy.generation.vllm_cfg.gpu_mem_utilization") == [
        "policy.generation.vllm_cfg.gpu_memory_utilization"
    ]
