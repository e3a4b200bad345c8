"""Issue 27 items 1 and 6: the NeMo-RL stand-ins behave per release (sim_nemo_rl/examples/nemo_rl_releases.py, each
fact with its tag and path) and so can disagree with nbtools.

The reward test runs nbtools' own launch command (the wrapper ``python -m nbtools.rewards.nemo_rl_env`` and the entry
script it names) against the release's stand-in checkout: on NeMo-RL v0.5.0 ``run_grpo_math.py`` builds the math
environment whatever ``data.env_name`` says, so a launch through it trains on the math reward.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nbtools
from nbtools.rewards import nemo_rl_env
from nbtools.rewards._ship import ENV_NAME_KEY
from nbtools.trainers import nemo_rl
from nbtools.trainers.nemo_rl import NEMO_RL

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
STAND_INS = TESTS / "doubles" / "sim_nemo_rl"
REGISTRY_DOUBLE = TESTS / "doubles" / "nemo_rl_registry_double"
MIX = [{"name": "math_expr", "weight": 0.8}, {"name": "format", "weight": 0.2}]

sys.path.insert(0, str(STAND_INS / "examples"))
import nemo_rl_releases  # noqa: E402
import sim_nemo_rl_config  # noqa: E402


def _checkout(root: Path, version: str) -> Path:
    """The release's stand-in of ``/opt/nemo-rl``: the doubles, the release's example configs, the image's facts."""
    code = root / f"nemo-rl-{version}"
    shutil.copytree(STAND_INS, code, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TESTS / "assets" / "nemo-rl" / version / "examples" / "configs", code / "examples" / "configs")
    (code / "sim_gke.json").write_text(json.dumps({"nbtools_root": str(ROOT), "rehearsal_config": "",
                                                   "nemo_rl_version": version}))
    return code


def _cfg(tmp_path: Path, version: str, **changes):
    return nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml", overrides={
        "images.nemo_rl_version": version, "trainer.reward_functions": MIX,
        **({"trainer.recipe": "examples/configs/grpo_math_1B.yaml"} if version == "v0.5.0" else {}), **changes})


def _environment_the_job_builds(cfg, code: Path) -> dict:
    """Run nbtools' launch command in the stand-in checkout, up to the environment NeMo-RL would build."""
    cfg = cfg.replace(**{"trainer.code_dir": str(code), "trainer.python": sys.executable})
    env = {**os.environ, "NEMO_RL_SIM_ENV_ONLY": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(REGISTRY_DOUBLE)])}  # nbtools + NeMo-RL's registry (double)
    out = subprocess.run(["bash", "-c", nemo_rl.command(cfg)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("ENVIRONMENT="))
    return json.loads(line.removeprefix("ENVIRONMENT="))


@pytest.mark.parametrize("version", ["v0.5.0", "v0.7.0"])
@pytest.mark.slow  # a Ray job per release
def test_the_reward_mix_is_the_environment_the_release_builds(tmp_path, monkeypatch, version):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    got = _environment_the_job_builds(_cfg(tmp_path, version), _checkout(tmp_path, version))
    assert (got["name"], got["fqn"]) == (nemo_rl_env.ENV_NAME, nemo_rl_env.ENV_FQN), (
        f"NeMo-RL {version} would score with {got['fqn']}, not the reward mix")
    assert [r["name"] for r in got["config"]["reward_functions"]] == ["math_expr", "format"]


def test_without_rewards_the_release_trains_on_its_math_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = _cfg(tmp_path, "v0.5.0", **{"trainer.reward_functions": []})
    got = _environment_the_job_builds(cfg, _checkout(tmp_path, "v0.5.0"))
    assert got["fqn"] == nemo_rl_releases.MATH_ENV_FQN and got["name"] == "math"


def test_the_stand_ins_ignore_or_reject_what_the_release_would():
    cfg = {"data": {"env_name": nemo_rl_env.ENV_NAME}, "env": {"math": {"num_workers": 8}, nemo_rl_env.ENV_NAME: {}}}
    # v0.5.0's run_grpo_math.py never reads data.env_name: the math environment, whatever the config says
    assert sim_nemo_rl_config.environment(cfg, "examples/run_grpo_math.py", "v0.5.0")[:2] == (
        "math", nemo_rl_releases.MATH_ENV_FQN)
    # v0.5.0's run_grpo.py reads it, and asserts the name is registered (nothing registered nbtools_reward here)
    with pytest.raises(SystemExit, match="Env name nbtools_reward is not registered in ENV_REGISTRY"):
        sim_nemo_rl_config.environment(cfg, "examples/run_grpo.py", "v0.5.0")
    # v0.7.0 has no run_grpo_math.py at all
    with pytest.raises(SystemExit, match="No such file"):
        sim_nemo_rl_config.environment(cfg, "examples/run_grpo_math.py", "v0.7.0")
    # v0.7.0 reads data.default.env_name (a flat data.env_name is not where it looks)
    v07 = {"data": {"default": {"env_name": "math"}, "env_name": nemo_rl_env.ENV_NAME}, "env": {"math": {}}}
    assert sim_nemo_rl_config.environment(v07, "examples/run_grpo.py", "v0.7.0")[0] == "math"


def test_v070_registers_the_environments_v050_lacks():
    """NeMo-RL v0.7.0's ENV_REGISTRY (nemo_rl/environments/utils.py) adds math_multi_reward, vlm and nemo_gym; the
    stand-in had v0.5.0's five, so a v0.7.0 recipe naming them failed only here."""
    for name, fqn in (("math_multi_reward", "MathMultiRewardEnvironment"), ("vlm", "VLMEnvironment"), ("nemo_gym", "NemoGym")):
        cfg = {"data": {"default": {"env_name": name}}, "env": {name: {}}}
        assert sim_nemo_rl_config.environment(cfg, "examples/run_grpo.py", "v0.7.0")[1].endswith("." + fqn)
        with pytest.raises(SystemExit, match=f"Env name {name} is not registered"):
            sim_nemo_rl_config.environment({"data": {"env_name": name}, "env": {name: {}}}, "examples/run_grpo.py", "v0.5.0")


@pytest.mark.parametrize("version", sorted(nemo_rl_releases.RELEASES))
def test_nbtools_tables_agree_with_the_release_facts(version):
    row = nemo_rl_releases.facts(version)
    assert NEMO_RL[version].entrypoint in row["scripts"]
    assert all(len(f["source"]) == 2 and f["source"][0] == version for f in row["scripts"].values())
    # the script nbtools launches a reward mix through reads the key nbtools sets
    cfg = nbtools.config.Experiment(name="x").replace(**{"images.nemo_rl_version": version,
                                                         "trainer.reward_functions": MIX})
    script = nemo_rl.entry_script(cfg)
    assert nemo_rl_releases.script_facts(version, script)["env_name_key"] == ENV_NAME_KEY[version]


@pytest.mark.parametrize("version", sorted(nemo_rl_releases.RELEASES))
def test_per_release_artifacts_agree_with_the_release_facts(version):
    from nbtools.trainers.nemo_rl import NEMO_RL

    row, ours = nemo_rl_releases.facts(version), NEMO_RL[version]
    assert (ours.val_dumps, ours.baseline_reward, ours.data_validation) == (
        row["writes_val_dumps"], row["logs_baseline_reward"], row["data_sections"])


def test_data_validation_on_v050_is_refused_not_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = _cfg(tmp_path, "v0.5.0", **{"trainer.reward_functions": [], "data.validation": "my_val.jsonl"})
    assert not [o for o in nemo_rl.overrides(cfg) if "validation" in o.key]  # nothing in the command carries it
    report = nbtools.launch.lint(cfg, existing_steps=[], client_ray_version=cfg.images.resolved_ray_version)
    found = [f for f in report.findings if f.rule == "release-artifacts" and f.key == "data.validation"]
    assert found and found[0].severity == "blocking" and "v0.7.0" in found[0].fix, str(report)
    assert any(f.rule == "release-artifacts" and "val_data_step" in f.message for f in report.findings)
    v07 = _cfg(tmp_path, "v0.7.0", **{"trainer.reward_functions": [], "data.validation": "my_val.jsonl"})
    report = nbtools.launch.lint(v07, existing_steps=[], client_ray_version=v07.images.resolved_ray_version)
    assert not [f for f in report.findings if f.rule == "release-artifacts"], str(report)


def test_notebook_08_points_to_the_mechanism_that_reaches_a_math_run():
    """Issue 27 item 3: only NeMo-RL's VLM environment reads env.<name>.reward_functions (v0.5.0 and v0.7.0
    nemo_rl/environments/vlm_environment.py); a math run scores with what trainer.reward_functions ships."""
    cells = json.loads((ROOT / "notebooks" / "08_rewards.ipynb").read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "`trainer.reward_functions`" in text and "`trainer.reward_module`" in text
    for line in (ln for ln in text.splitlines() if "env.<name>.reward_functions" in ln):
        assert "VLM" in line, line


def test_the_rehearsal_records_its_mix_where_a_nemo_rl_run_has_it(tmp_path, monkeypatch):
    """NeMo-RL's math env has no reward list (nemo-rl-facts: only the VLM env reads one); a mix runs as nbtools'
    environment. The rehearsal's saved config.yaml says so with the keys a v0.7.0 launch of the same mix sets."""
    from nbtools.rehearsal import artifacts
    from nbtools.trainers import _tree

    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    local = nbtools.config.load(ROOT / "experiments" / "local.yaml", overrides={"rehearsal.reward_functions": MIX})
    dump = artifacts.nemo_rl_config(local, tmp_path / "exp_001", world_size=2)
    launch = dict(nbtools.rewards.reward_overrides(_cfg(tmp_path, "v0.7.0")))
    assert set(launch) == {"data.default.env_name", f"env.{nemo_rl_env.ENV_NAME}"}
    assert _tree.get_value(dump, "data.default.env_name") == launch["data.default.env_name"] == nemo_rl_env.ENV_NAME
    ours, theirs = _tree.get_value(dump, f"env.{nemo_rl_env.ENV_NAME}"), launch[f"env.{nemo_rl_env.ENV_NAME}"]
    assert [(r["name"], r["weight"]) for r in ours["reward_functions"]] == \
        [(r["name"], r["weight"]) for r in theirs["reward_functions"]] == [("math_expr", 0.8), ("format", 0.2)]
    assert "reward_functions" not in dump["env"]["math"]
