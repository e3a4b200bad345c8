"""Issue 27 item 8: the tutorials' runs as experiment files a user can pick (experiments/tutorial-*.yaml), each the
recipe in ``nbtools.launch.recipes`` (one source: the files are ``recipes.to_yaml``), listed in the README, passing
``nbtools launch FILE --lint-only`` and ``nbtools fit FILE`` with the tutorial's own values."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools
from nbtools.launch import recipes

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "tutorial-001-gemma3-27b-it": {"cluster.worker_replicas": 3, "grpo.num_prompts_per_step": 16,
                                   "grpo.num_generations_per_prompt": 64, "trainer.colocated": False},
    "tutorial-003-qwen3-1.7b-deepscaler": {"backend": "ray", "ray.address": "http://nemo-rl-head.lepton.example:8265"},
    "tutorial-004-llama3.1-8b": {"cluster.worker_replicas": 4, "model.max_total_sequence_length": 4096,
                                 "logging.wandb": True},
    "tutorial-004-qwen2.5-1.5b": {"cluster.worker_replicas": 1, "model.max_total_sequence_length": 512},
}


def _get(cfg, dotted):
    obj = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture
def cli(capfd, monkeypatch):
    from nbtools import cli as nbcli

    monkeypatch.delenv("NBTOOLS_DEBUG", raising=False)

    def go(*argv):
        capfd.readouterr()
        code = nbcli.main([str(a) for a in argv])
        out, err = capfd.readouterr()
        return code, out + err

    return go


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_tutorial_run_is_a_file_with_the_tutorials_values_that_lints_and_fits(name, cli):
    path = ROOT / "experiments" / f"{name}.yaml"
    assert path.read_text() == recipes.to_yaml(name), "regenerate it: recipes.to_yaml(name)"
    cfg = nbtools.config.load(path)
    assert nbtools.config.to_dict(cfg) == nbtools.config.to_dict(recipes.get(name))
    for key, want in FILES[name].items():
        assert _get(cfg, key) == want, key
    if cfg.logging.wandb:  # notebook 04 reads TensorBoard event files: kept on beside W&B
        assert cfg.logging.tensorboard
    code, text = cli("launch", path, "--lint-only")
    assert code == 0, text
    code, text = cli("fit", path)
    assert code == 0, text
    assert f"experiments/{name}.yaml" in (ROOT / "README.md").read_text()
