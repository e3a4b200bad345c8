"""Issue 14 item 14: a reward written for notebook 08 scores the real NeMo-RL job.

NeMo-RL's hook (the scripts that call ``create_env``: v0.5.0's ``examples/run_grpo.py``, not its ``run_grpo_math.py``,
which hard-codes the math environment; v0.7.0's ``examples/run_grpo.py``): the data config names the environment
(``data.env_name`` / ``data.default.env_name``), ``create_env`` builds ``ENV_REGISTRY[name]["actor_class_fqn"]`` with the py_executable of
``ACTOR_ENVIRONMENT_REGISTRY`` and the config ``env.<name>`` (NVIDIA-NeMo/RL ``nemo_rl/environments/utils.py``,
``nemo_rl/distributed/ray_actor_environment_registry.py``). Overrides are applied with Hydra exactly as NeMo-RL's
``nemo_rl/utils/config.py`` ``parse_hydra_overrides`` does; the job test runs on the session's real Ray head.
"""

from __future__ import annotations

import ast
import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import nbtools
from nbtools.rewards import nemo_rl_env
from nbtools.trainers import _tree, nemo_rl

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "nemo_rl_registry_double" / "nemo_rl"
MIX = [{"name": "math_expr", "weight": 0.8}, {"name": "short_answer", "weight": 0.2, "kwargs": {"limit": 40}}]
MODULE = '''import nbtools


@nbtools.rewards.register("short_answer")
def short_answer(ground_truth, response, limit=200):
    """1.0 for a response of at most `limit` characters (a custom reward from notebook 08)."""
    return (1.0 if len(response) <= limit else 0.0), None
'''


@pytest.fixture
def reward_cfg(tmp_path, monkeypatch):
    """The B200 example, next to a user's reward module, with the mix that uses it."""
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "my_rewards.py").write_text(MODULE)
    shutil.copy(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml", tmp_path / "exp.yaml")

    def make(version="v0.7.0"):
        return nbtools.config.load(tmp_path / "exp.yaml", overrides={
            "trainer.reward_module": "my_rewards.py", "trainer.reward_functions": MIX, "images.nemo_rl_version": version,
            **({"trainer.recipe": "examples/configs/grpo_math_1B.yaml"} if version == "v0.5.0" else {})})

    yield make
    nbtools.rewards.unregister("short_answer")
    sys.modules.pop("my_rewards", None)


def _apply_like_nemo_rl(tree: dict, overrides: list[str]):
    """NeMo-RL's parse_hydra_overrides (nemo_rl/utils/config.py), line for line."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = OmegaConf.create(tree)
    OmegaConf.set_struct(cfg, True)
    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)
    return cfg


@pytest.mark.parametrize("version,key", [("v0.5.0", "data.env_name"), ("v0.7.0", "data.default.env_name")])
def test_the_command_routes_rewards_through_the_nbtools_environment(reward_cfg, version, key):
    cfg = reward_cfg(version)
    lines = nemo_rl.command_lines(cfg)
    assert lines[0].startswith(f"cd /opt/nemo-rl && python -u -m nbtools.rewards.nemo_rl_env {nemo_rl.entry_script(cfg)} ")
    tree = nemo_rl.recipe_tree(cfg)
    assert _tree.has_key(tree, key), f"{key} is where NeMo-RL {version}'s data config names the environment"
    applied = _apply_like_nemo_rl(tree, [shlex.split(line)[0] for line in lines[1:]])
    assert OmegaConf.select(applied, key) == "nbtools_reward"
    env = OmegaConf.to_container(applied.env.nbtools_reward)
    assert env == {"module": "my_rewards", "reward_functions": [
        {"name": "math_expr", "weight": 0.8, "kwargs": {}}, {"name": "short_answer", "weight": 0.2, "kwargs": {"limit": 40}}]}
    spec = nbtools.launch.build(cfg)
    staged = Path(spec.runtime_env["py_modules"][1])  # Ray's Jobs SDK uploads py_modules entries as directories
    assert staged.name == "my_rewards" and MODULE in (staged / "__init__.py").read_text()
    assert Path(spec.runtime_env["py_modules"][0]).name == "nbtools"
    report = nbtools.launch.lint(cfg, existing_steps=[], client_ray_version=cfg.images.resolved_ray_version)
    assert not [f for f in report.findings if f.rule in ("override-keys", "unknown-added-keys")], str(report)


def test_without_rewards_nothing_changes_and_bad_specs_fail_early(reward_cfg, tmp_path):
    plain = nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml")
    assert "nemo_rl_env" not in nemo_rl.command(plain) and "py_modules" not in nbtools.launch.build(plain).runtime_env
    mix = nbtools.rewards.check_rewards(reward_cfg())  # imports my_rewards.py, so its reward is in the registry
    assert mix.names == ["math_expr", "short_answer"]
    with pytest.raises(nbtools.errors.ConfigError, match="neither a .py file nor a package"):
        nbtools.rewards.reward_py_modules(reward_cfg().replace(**{"trainer.reward_module": "missing.py"}))
    with pytest.raises(nbtools.errors.ConfigError, match="reward_module: set without trainer.reward_functions"):
        reward_cfg().replace(**{"trainer.reward_functions": []})
    with pytest.raises(nbtools.errors.ConfigError, match="only NeMo-RL runs"):
        reward_cfg().replace(**{"trainer.kind": "verl", "data.dataset": "gsm8k"})


def test_environment_return_has_nemo_rls_fields_and_scores_like_the_local_mix(reward_cfg):
    src = (ROOT / "tests" / "assets" / "nemo-rl" / "environments" / "interfaces.py.txt").read_text()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "EnvironmentReturn")
    upstream = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)]
    assert list(nemo_rl_env.EnvironmentReturn._fields) == upstream
    nbtools.rewards.check_rewards(reward_cfg())
    env = nemo_rl_env.RewardMixEnv(nbtools.rewards.reward_env_config(reward_cfg()))
    logs = [[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "so <answer>4</answer>"}],
            [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "it is five, " * 10}]]
    out = env.step(logs, [{"ground_truth": "4"}, {"ground_truth": "4"}])
    local = nbtools.rewards.combine(MIX).score(["4", "4"], ["so <answer>4</answer>", "it is five, " * 10])
    assert out.rewards.tolist() == pytest.approx(list(local)) and out.rewards.tolist() == pytest.approx([1.0, 0.0])
    assert [o["content"] for o in out.observations] == ["Environment: correct", "Environment: incorrect"]


STAND_IN_FOR_RUN_GRPO = '''
import json, sys
import ray
from nemo_rl.environments.utils import create_env

cfg = json.loads(sys.argv[sys.argv.index("--env") + 1])
ray.init(address="auto")
env = create_env("nbtools_reward", {"nbtools_reward": cfg})  # what NeMo-RL's setup does for data.env_name
logs = [[{"role": "assistant", "content": "so <answer>4</answer>"}], [{"role": "assistant", "content": "it is five, " * 10}]]
out = ray.get(env.step.remote(logs, [{"ground_truth": "4"}, {"ground_truth": "4"}]))
print("REWARDS=" + json.dumps(out[3].tolist()))
'''


def test_the_reward_module_reaches_the_environment_actor_in_a_real_ray_job(reward_cfg, ray_head, tmp_path):
    cfg = reward_cfg()
    script = tmp_path / "run_grpo_stand_in.py"
    script.write_text(STAND_IN_FOR_RUN_GRPO)
    spec = nbtools.launch.build(cfg)
    py_modules = [*spec.runtime_env["py_modules"], str(DOUBLE)]  # + the registry double in place of NeMo-RL
    env_json = json.dumps(nbtools.rewards.reward_env_config(cfg))
    entry = f"{sys.executable} -u -m {nemo_rl_env.__name__} {script} --env {shlex.quote(env_json)}"
    job = nbtools.jobs.submit(ray_head.dashboard_url, entrypoint=entry, runtime_env={"py_modules": py_modules},
                              submission_id=f"reward-ship-{tmp_path.name}"[-60:])
    job.wait(timeout=240)
    line = next(x for x in job.logs().splitlines() if x.startswith("REWARDS="))
    assert json.loads(line.removeprefix("REWARDS=")) == pytest.approx([1.0, 0.0])


def test_importing_the_environment_module_leaves_ray_unimported_until_the_actor_class_is_asked_for():
    """Every ``nbtools`` command imports this module (launch builds its command line); ray costs ~2 s a process."""
    import subprocess

    code = ("import sys, nbtools.cli, nbtools.launch, nbtools.rewards.nemo_rl_env as m; print('ray' in sys.modules); "
            "c = m.RewardMixEnvironment; print('ray' in sys.modules, type(c).__name__, c is m.RewardMixEnvironment)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "True", "ActorClass(RewardMixEnv)", "True"], out


def test_the_shipped_example_module_is_what_notebook_08_would_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml", overrides={
        "trainer.reward_module": "my_rewards.py",
        "trainer.reward_functions": [{"name": "math_expr", "weight": 0.7},
                                     {"name": "closeness", "weight": 0.3, "kwargs": {"scale": 9.0}}]})
    try:
        mix = nbtools.rewards.check_rewards(cfg)
        assert mix("6", "<answer>5</answer>")[0] == pytest.approx(0.3 * (1 - 1 / 9))
        assert "-m nbtools.rewards.nemo_rl_env examples/run_grpo.py" in nemo_rl.command(cfg)
        staged = Path(nbtools.rewards.reward_py_modules(cfg)[0])
        assert staged.name == "my_rewards" and "def closeness" in (staged / "__init__.py").read_text()
    finally:
        nbtools.rewards.unregister("closeness")
        sys.modules.pop("my_rewards", None)
