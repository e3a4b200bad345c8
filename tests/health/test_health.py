"""nbtools.health without a run: the reward contract against NeMo-RL's real prompt files (nbtools/data), the example
experiment's reward lines (refused as they were, passing as fixed), thresholds and their errors."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

import nbtools
from nbtools import health
from nbtools.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "experiments" / "gke-b200-gemma3-1b.yaml"


@pytest.mark.parametrize(("prompt", "kind", "answer_tag"), [
    ("examples/prompts/cot.txt", "boxed", None), ("examples/prompts/math.txt", "boxed", None),
    ("examples/prompts/gsm8k.txt", "tags", "answer"), ("examples/prompts/geo3k.txt", "tags", "answer"),
])
def test_what_nemo_rls_prompt_files_ask_for(prompt, kind, answer_tag):
    asks = health.format_asked_by(health.nemo_rl_prompt(prompt), source=prompt)
    assert asks.kind == kind
    if answer_tag:
        assert (asks.answer_tag, asks.think_tag) == (answer_tag, "think")
    assert health.nemo_rl_prompt("examples/prompts/no_such.txt") is None


def test_contract_reads_formats_and_scores_right_and_wrong_answers():
    boxed = health.format_asked_by(health.nemo_rl_prompt("examples/prompts/cot.txt"))
    tags = health.ResponseFormat("tags")
    bad = health.reward_contract([{"name": "math_expr", "weight": 1.0}], asks=boxed)
    assert not bad.ok and set(bad.scores) == {0.0} and len(bad.scores) == 2 * len(health.SAMPLE_PROBLEMS)
    assert "parse <answer> but the prompt asks for \\boxed{}" in bad.message and "exact_answer" in bad.fix
    good = health.reward_contract([{"name": "exact_answer", "weight": 1.0}], asks=boxed)
    assert good.ok and set(good.scores) == {0.0, 1.0}, good
    assert health.reward_contract([{"name": "math_expr", "weight": 1.0}], asks=tags).ok
    flat = health.reward_contract([{"name": "format", "weight": 1.0}], asks=tags)  # right and wrong alike: 1.0
    assert not flat.ok and "scores 1" in flat.message
    # real responses of a previous run count too: all-0 real scores with no asked format are refused
    real = health.reward_contract([{"name": "exact_alnum", "weight": 1.0}], asks=None,
                                  real=[("<answer> 7 </answer>", "8"), ("no tags", "8")])
    assert not real.ok and real.real_scores == [0.0, 0.0]


def _example(tmp_path: Path, reward_line: str | None = None) -> Path:
    """The example experiment with its reward lines uncommented (optionally another reward_functions line)."""
    text = EXAMPLE.read_text()
    text = text.replace("  # reward_module: my_rewards.py", "  reward_module: my_rewards.py")
    text = text.replace("  # reward_functions: [", "  reward_functions: [")
    if reward_line is not None:
        text = "\n".join(reward_line if ln.startswith("  reward_functions: [") else ln for ln in text.splitlines())
    shutil.copy(ROOT / "experiments" / "my_rewards.py", tmp_path / "my_rewards.py")
    out = tmp_path / EXAMPLE.name
    out.write_text(text)
    return out


@pytest.fixture
def _clean_rewards():
    yield
    if "closeness" in nbtools.rewards.available():
        nbtools.rewards.unregister("closeness")
    sys.modules.pop("my_rewards", None)


def _lint(path: Path):
    cfg = nbtools.config.load(path)
    return nbtools.launch.lint(cfg, cluster_gpus=8, existing_steps=[], client_ray_version="2.55.1")


def test_the_example_experiment_uncommented_passes_and_its_old_pairing_is_refused(tmp_path, _clean_rewards):
    report = _lint(_example(tmp_path))
    assert "reward-contract" in report.checked and "reward-contract" not in report.rules(), str(report)
    old = "  reward_functions: [{name: math_expr, weight: 0.7}, {name: closeness, weight: 0.3, kwargs: {scale: 9.0}}]"
    refused = _lint(_example(tmp_path, old))
    found = [f for f in refused.blocking if f.rule == "reward-contract"]
    assert found and found[0].key == "trainer.reward_functions", str(refused)
    assert "parse <answer> but the prompt asks for \\boxed{} (examples/prompts/cot.txt)" in found[0].message
    warned = nbtools.launch.lint(nbtools.config.load(_example(tmp_path, old)), cluster_gpus=8, existing_steps=[],
                                 client_ray_version="2.55.1", reward_contract="warning")
    assert "reward-contract" in {f.rule for f in warned.warnings} and "reward-contract" not in {
        f.rule for f in warned.blocking}


def test_without_custom_rewards_the_trainers_environment_is_not_second_guessed():
    cfg = nbtools.config.load(EXAMPLE)  # reward lines commented: NeMo-RL's math env grades \boxed{} itself
    report = nbtools.launch.lint(cfg, cluster_gpus=8, existing_steps=[], client_ray_version="2.55.1")
    assert "reward-contract" in report.checked and "reward-contract" not in report.rules()


def test_thresholds_and_check_names_are_validated_at_once(tmp_path):
    exp = tmp_path / "logs" / "exp_001"
    exp.mkdir(parents=True)
    (exp / "train_data_step1.jsonl").write_text("".join(
        f'{{"content": [["p", "<answer> 1 </answer>", "Environment: correct"]], "rewards": [{r}], "idx": {i}}}\n'
        for i, r in enumerate((1.0, 0.5))))
    with pytest.raises(ConfigError) as e:
        health.check(tmp_path / "logs", thresholds={"truncaton": 0.3, "zero-reward": "high"}, checks=["nope"])
    text = str(e.value)
    assert "unknown check 'truncaton'" in text and "thresholds['zero-reward']" in text and "'nope'" in text
    report = health.check(tmp_path / "logs", thresholds={"zero-reward": (0.1, 0.2)})
    assert report["zero-reward"].threshold == 0.1 and report.steps == (1, 1) and report.status == "healthy"
    strict = health.check(tmp_path / "logs", thresholds={"zero-reward": {"unhealthy": 0.0}})
    assert strict["zero-reward"].status == "unhealthy" and strict["zero-reward"].first_step == 1


def test_the_command_line_offers_health_and_stop_when_unhealthy():
    import subprocess

    def help_of(*cmd):
        return subprocess.run([sys.executable, "-m", "nbtools.cli", *cmd, "--help"], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, check=True).stdout

    assert "--stop-when-unhealthy" in help_of("launch") and "--health-every" in help_of("launch")
    text = help_of("health")
    assert "usage: nbtools health" in text and "--config" in text and "--threshold" in text
    r = subprocess.run([sys.executable, "-m", "nbtools.cli", "health", str(ROOT / "no-such-run"), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 1 and "found nothing there" in r.stdout and "fix" in r.stdout


def test_a_verl_gsm8k_runs_answer_format_is_gsm8ks_answer_line(tmp_path):
    """verl's GSM8K rule reads ``#### N`` (v0.7.0 verl/utils/reward_score/gsm8k.py): with the experiment, answers in
    that form are parseable and tagged answers are not; the message names what the rule reads."""
    from nbtools.trainers.verl.files import dump_generations

    cfg = nbtools.config.load(Path(__file__).resolve().parents[2] / "experiments" / "gke-b200-verl.yaml")
    assert health.parse_targets(nbtools.rewards.trained_with(cfg)) == [("gsm8k", "")]
    for step, outputs in ((1, ["12 + 4 = 16. #### 16", "#### -3"]), (2, ["<answer> 16 </answer>", "#### x"])):
        dump_generations(tmp_path / "rollout_data", step, inputs=["q"] * 2, outputs=outputs, gts=["16", "16"],
                         scores=[1.0, 0.0])
    result = health.check(tmp_path / "rollout_data", config=cfg, checks=["answer-format"])["answer-format"]
    assert result.series.to_dict() == {1: 0.0, 2: 1.0} and "have no #### N" in result.message, result
