"""nbtools.trainers: one Trainer interface, one registry, one entry per release; no trainer name tested elsewhere."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

import nbtools
from nbtools import config, trainers
from nbtools.errors import ConfigError
from nbtools.trainers import nemo_rl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))


def _cfg(name: str, backend: str = "gke", **over) -> config.Experiment:
    cfg = config.load(ROOT / "experiments" / name, backend=backend)
    return cfg.replace(**over) if over else cfg


def test_each_backend_runs_the_trainer_the_registry_names():
    local = trainers.get(_cfg("local.yaml", backend="local"))
    nemo = trainers.get(_cfg("gke-b200-gemma3-1b.yaml"))
    verl = trainers.get(_cfg("gke-b200-verl.yaml"))
    assert local.miniature and local.eval_plan == "held-out-local" and not local.release
    assert (nemo.name, nemo.release, nemo.miniature, nemo.eval_plan) == ("nemo-rl", "v0.7.0", False, "run-eval-job")
    assert (verl.name, verl.release, verl.code_on_storage, verl.eval_plan) == ("verl", "v0.7.0", True, "generate-job")
    for t in (local, nemo, verl):
        assert isinstance(t, trainers.Trainer), f"{type(t).__name__} does not implement every Trainer verb"


@pytest.mark.parametrize("release", sorted(trainers.NEMO_RL))
def test_every_nemo_rl_release_is_complete(release):
    """One entry in releases.NEMO_RL, plus what the config and the package data need for it; nothing else."""
    cfg = _cfg("gke-b200-gemma3-1b.yaml", **{"images.nemo_rl_version": release})
    trainer = trainers.get(cfg)
    assert trainer.release == release and isinstance(trainer, trainers.Trainer)
    assert release in config.NEMO_RL_VERSIONS, "the cluster image and Ray pin of the release"
    allowed = typing.get_args(typing.get_type_hints(config.ImagesConfig)["nemo_rl_version"])
    assert set(allowed) == set(trainers.NEMO_RL) == set(config.NEMO_RL_VERSIONS)
    assert trainers.known_configs(release), f"nbtools/data/nemo_rl_keys_{release}.json (tools/gen_nemo_rl_keys.py)"
    assert trainer.job(cfg).command.split(" && ")[1].split()[2] == trainers.NEMO_RL[release].entrypoint


def test_the_release_table_chooses_the_entry_point_that_honours_a_reward_mix(monkeypatch):
    """A release whose plain entry point ignores a reward environment names the one that honours it, as data."""
    cfg = _cfg("gke-b200-gemma3-1b.yaml", **{"images.nemo_rl_version": "v0.5.0"})
    assert nemo_rl.entry_script(cfg) == "examples/run_grpo_math.py"
    patched = trainers.releases.NemoRlRelease("v0.5.0", "examples/run_grpo_math.py", "examples/run_grpo.py")
    monkeypatch.setitem(trainers.NEMO_RL, "v0.5.0", patched)
    assert nemo_rl.entry_script(cfg) == "examples/run_grpo_math.py"  # no mix: the plain one
    mixed = cfg.replace(**{"trainer.reward_functions": [{"name": "math_expr", "weight": 1.0}]})
    assert nemo_rl.entry_script(mixed) == "examples/run_grpo.py"


def test_config_load_reports_the_registries_rules_with_its_own(tmp_path):
    bad = {"name": "x", "backend": "gke", "gcp": {"project": "p"}, "storage": {"bucket": "b"},
           "trainer": {"kind": "verll"}, "grpo": {"max_num_steps": 0}}
    with pytest.raises(ConfigError) as e:
        config.from_dict(bad)
    text = str(e.value)
    assert "trainer.kind: 'verll' is not allowed; allowed: 'nemo-rl', 'verl' (did you mean 'verl'?)" in text
    assert "grpo.max_num_steps: 0 must be >= 1" in text  # the config's own rule, in the same report
    with pytest.raises(ConfigError, match="does not pin verl"):
        _cfg("gke-b200-verl.yaml", **{"trainer.verl_ref": "main"})


def test_the_package_wires_the_registries_into_the_config():
    c = nbtools.config._contrib.CONTRIBUTIONS
    assert set(c.rules) == {"backends", "trainers", "gpus"} and set(c.rows) == {"backends", "trainers"}  # gpus: fit's GPU table
    cfg = _cfg("gke-b200-gemma3-1b.yaml")
    assert cfg.log_dir == nbtools.backends.get(cfg).log_dir
    assert "| trainer | `nemo-rl (v0.7.0)` |" in cfg._repr_markdown_()


# Quoted trainer names outside nbtools/trainers/ that are not a branch on the trainer: each with why it stays.
# The test fails on any other, and on an entry that no longer matches (so the list stays true).
# (Data files such as nbtools/data/recipes.yaml, the tutorials' runs, are not .py files and name trainers freely.)
ALLOWED = {
    "nbtools/config/_tables.py": "trainer.kind's default value: the config is the floor and cannot ask the registry",
    "nbtools/backends/_types.py": "LOCAL_SECTIONS: the config section named `rehearsal`, which only a local run reads",
    "nbtools/rehearsal/writers.py": "the rehearsal's writers keyed by trainers.Layout, the value trainers.get(cfg).layout "
                                    "names (a registry, not a branch on the trainer)",
}


def test_no_module_outside_the_registry_names_a_trainer():
    pattern = re.compile(r'"(nemo-rl|verl|rehearsal)"')
    found = {str(p.relative_to(ROOT)) for p in (ROOT / "nbtools").rglob("*.py")
             if "trainers" not in p.relative_to(ROOT / "nbtools").parts[:1] and pattern.search(p.read_text())}
    assert found - set(ALLOWED) == set(), "ask nbtools.trainers.get(cfg) instead of testing a trainer's name"
    assert set(ALLOWED) - found == set(), "remove the stale ALLOWED entries"


def test_the_citations_are_the_projects_own():
    """verl: HybridFlow as published at EuroSys 2025 (verl's README, v0.7.0, announces it; its BibTeX there is the
    arXiv preprint 2409.19256); NeMo-RL: the @misc entry of its README (NVIDIA-NeMo/RL v0.7.0 README.md)."""
    name, verl = trainers.CITATIONS["verl"]
    assert name == "verl" and verl.startswith("@inproceedings{sheng2025hybridflow,")
    fields = dict(re.findall(r"^\s+(\w+)\s*=\s*\{(.*)\},?$", verl, re.M))
    assert fields["title"] == "HybridFlow: A Flexible and Efficient RLHF Framework" and fields["year"] == "2025"
    assert "EuroSys '25" in fields["booktitle"] and fields["eprint"] == "2409.19256"
    assert fields["author"].split(" and ")[0] == "Sheng, Guangming" and len(fields["author"].split(" and ")) == 9
    assert verl.count("{") == verl.count("}")
    _, nemo = trainers.CITATIONS["NeMo-RL"]
    assert nemo.startswith("@misc{nemo-rl,") and "https://github.com/NVIDIA-NeMo/RL" in nemo
    assert set(trainers.CITATIONS) == {trainers.trainer_class(k).label for k in trainers.names()}  # the card's keys


def test_every_verl_scalar_name_is_a_tag_verl_v070_logs():
    """Each name nbtools reads from a verl run (curves, health, card) is one verl v0.7.0 emits (tests/assets/verl/
    v0.7.0/metric_tags.json, with the line of the tag that logs it; v0.9.1/metric_tags.json for a later release's): a name verl never writes would leave a curve or
    a health check silently empty. ``critic/kl`` was one (v0.7.0 logs the in-reward KL as actor/reward_kl_penalty)."""
    import json

    facts = json.loads((ROOT / "tests" / "assets" / "verl" / "v0.7.0" / "metric_tags.json").read_text())
    # names only a later release logs (0.9.x's V1 trainer: actor/perf/max_memory_allocated_gb)
    facts["tags"].update(json.loads((ROOT / "tests" / "assets" / "verl" / "v0.9.1" / "metric_tags.json").read_text())["tags"])
    timers = {f"timing_s/{name}" for name in facts["timers"]}
    unknown = []
    for role, names in trainers.METRIC_NAMES["verl"].items():
        for name in names:
            if "*" in name:
                if not name.startswith(tuple(facts["validation_prefixes"])):
                    unknown.append((role, name))
            elif name not in facts["tags"] and name not in timers:
                unknown.append((role, name))
    assert not unknown, f"names verl v0.7.0 does not log: {unknown}"
    assert trainers.METRIC_NAMES["verl"]["kl"], "no KL name for verl"
