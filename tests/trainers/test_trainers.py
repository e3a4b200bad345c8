"""nbtools.trainers: one Trainer interface, one registry, one entry per release; no trainer name tested elsewhere."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest
from ratchet import check_ratchet

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
    assert local.name == "rehearsal" and local.evaluator == "nbtools.evals.flow:HELD_OUT_HERE" and not local.release
    assert (nemo.name, nemo.release, nemo.evaluator) == ("nemo-rl", "v0.7.0", "nbtools.evals.flow:RUN_EVAL_JOB")
    assert (verl.name, verl.release, verl.evaluator) == ("verl", "v0.7.0", "nbtools.evals.flow:GENERATE_JOB")
    assert type(local).code_source(local.cfg) is None and type(nemo).code_source(_cfg("gke-b200-gemma3-1b.yaml")) is None
    assert type(verl).code_source(_cfg("gke-b200-verl.yaml")).ref == "v0.7.0"  # the image has no checkout
    for t in (local, nemo, verl):
        assert isinstance(t, trainers.Trainer), f"{type(t).__name__} does not implement every Trainer verb"



def test_the_backend_chooses_what_its_jobs_run():
    """trainers.get asks the backend (Backend.job_trainer), not the backends registry: the local backend's rehearsal
    stands in for trainer.kind, a backend handed in is the one asked, and the rehearsal's rules are the local
    backend's (config.load reports them under its keys)."""
    cfg = _cfg("local.yaml", backend="local")
    local = nbtools.backends.get(cfg)
    rehearsal = trainers.get(cfg, local)
    assert isinstance(rehearsal, trainers.Rehearsal) and rehearsal.imitates.name == cfg.trainer.kind

    class Cluster:  # a backend whose jobs run trainer.kind itself
        def job_trainer(self, trainer):
            return trainer

    assert trainers.get(cfg, Cluster()).name == cfg.trainer.kind
    with pytest.raises(ConfigError) as e:
        cfg.replace(**{"rehearsal.hidden_size": 65, "rehearsal.num_heads": 2})
    assert "rehearsal.hidden_size: 65 is not divisible by num_heads 2" in str(e.value)
    assert [t for _, t in nbtools.backends.rules(cfg)] == [t for _, t in trainers.Rehearsal.check(cfg)]
    assert not any(k.startswith("rehearsal.") for keys, _ in trainers.checks(cfg) for k in keys)
    # the readers below the trainers (the rewards' re-scoring) get the same trainer through the leaf registry
    from nbtools import _trainer_folders

    for c in (cfg, _cfg("gke-b200-verl.yaml")):
        assert type(_trainer_folders.job_trainer(c)) is type(trainers.get(c))
    assert _trainer_folders.job_trainer(cfg).imitates.name == cfg.trainer.kind


@pytest.mark.parametrize("release", sorted(nemo_rl.NEMO_RL))
def test_every_nemo_rl_release_is_complete(release):
    """One entry in releases.NEMO_RL, plus what the config and the package data need for it; nothing else."""
    cfg = _cfg("gke-b200-gemma3-1b.yaml", **{"images.nemo_rl_version": release})
    trainer = trainers.get(cfg)
    assert trainer.release == release and isinstance(trainer, trainers.Trainer)
    assert release in config.NEMO_RL_VERSIONS, "the cluster image and Ray pin of the release"
    allowed = typing.get_args(typing.get_type_hints(config.ImagesConfig)["nemo_rl_version"])
    assert set(allowed) == set(nemo_rl.NEMO_RL) == set(config.NEMO_RL_VERSIONS)
    assert trainers.known_configs(release), f"nbtools/data/nemo_rl_keys_{release}.json (tools/gen_nemo_rl_keys.py)"
    assert trainer.job().command.split(" && ")[1].split()[2] == nemo_rl.NEMO_RL[release].entrypoint


def test_the_release_table_chooses_the_entry_point_that_honours_a_reward_mix(monkeypatch):
    """A release whose plain entry point ignores a reward environment names the one that honours it, as data."""
    cfg = _cfg("gke-b200-gemma3-1b.yaml", **{"images.nemo_rl_version": "v0.5.0"})
    assert nemo_rl.entry_script(cfg) == "examples/run_grpo_math.py"
    patched = nemo_rl.NemoRlRelease("v0.5.0", "examples/run_grpo_math.py", "examples/run_grpo.py")
    monkeypatch.setitem(nemo_rl.NEMO_RL, "v0.5.0", patched)
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
    assert set(c.rules) == {"backends", "trainers"} and set(c.rows) == {"backends", "trainers"}  # the GPU table: the ray and local backends' check
    cfg = _cfg("gke-b200-gemma3-1b.yaml")
    assert cfg.log_dir == nbtools.backends.get(cfg).log_dir
    assert "| trainer | `nemo-rl (v0.7.0)` |" in cfg._repr_markdown_()


# Quoted trainer names outside nbtools/trainers/ that are not a branch on the trainer: each with why it stays.
# The test fails on any other, and on an entry that no longer matches (so the list stays true).
# (Data files such as nbtools/data/recipes.yaml, the tutorials' runs, are not .py files and name trainers freely.)
ALLOWED = {
    "nbtools/_trainer_folders.py": "the registry itself: each trainer.kind and its folder, as dotted names",
    "nbtools/config/_tables.py": "trainer.kind's default value: the config is the floor and cannot ask the registry",
    "nbtools/backends/_types.py": "LOCAL_SECTIONS: the config section named `rehearsal`, which only a local run reads",
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


# Trainer names in code (identifiers, imports, string constants equal to a trainer's kind or layout) outside
# nbtools/trainers/ and the registry's table, per file, by ast (docstrings and comments may cite upstream freely).
# A ratchet (2026-11-28: 36 files, 212 names; 37 files, 226 names before the one-folder-per-trainer move): a file may not gain a name
# and no new file may name a trainer. What remains is verl's own readers (checkpoints/_verl*, trajectories/_verl,
# rehearsal's verl writer) still to move into trainers/verl/, and the backends'/launch's branches on trainer facts.
TRAINER_NAMES_LEFT: dict[str, int] = {
    "nbtools/_layout.py": 5,
    "nbtools/checkpoints/__init__.py": 7,
    "nbtools/checkpoints/_listing.py": 7,
    "nbtools/checkpoints/_merge.py": 6,
    "nbtools/checkpoints/_remote.py": 1,
    "nbtools/checkpoints/_verl.py": 24,
    "nbtools/checkpoints/_verl_merge.py": 8,
    "nbtools/cli/_kinds.py": 4,
    "nbtools/cli/_metrics.py": 7,
    "nbtools/cli/_prepare.py": 4,
    "nbtools/config/__init__.py": 1,
    "nbtools/config/_sections.py": 12,
    "nbtools/config/_tables.py": 4,
    "nbtools/evals/generate_job.py": 5,
    "nbtools/evals/job.py": 6,
    "nbtools/evals/vllm_generate.py": 1,
    "nbtools/health/__init__.py": 1,
    "nbtools/health/_contract.py": 1,
    "nbtools/launch/_attempts.py": 6,
    "nbtools/launch/_outputs.py": 4,
    "nbtools/launch/_prepare.py": 2,
    "nbtools/launch/_rules_reward.py": 3,
    "nbtools/launch/lint.py": 5,
    "nbtools/launch/verl_prepare.py": 7,
    "nbtools/metrics.py": 4,
    "nbtools/rehearsal/artifacts.py": 2,
    "nbtools/rehearsal/writers.py": 14,
    "nbtools/rewards/__init__.py": 2,
    "nbtools/rewards/_advantages.py": 1,
    "nbtools/rewards/_builtins.py": 3,
    "nbtools/rewards/_rescore.py": 2,
    "nbtools/rewards/_ship.py": 2,
    "nbtools/rewards/nemo_rl_env.py": 3,
    "nbtools/trajectories/__init__.py": 27,
    "nbtools/trajectories/_verl.py": 8,
}
_TRAINER_NAME = re.compile(r"(?<![a-z])(nemo_?rl|verl)(?![a-z])", re.I)


def _trainer_names(path: Path) -> int:
    hits = 0
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        hits += bool(
            (isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"nemo-rl|nemo_rl|verl", n.value))
            or (isinstance(n, ast.Name) and _TRAINER_NAME.search(n.id))
            or (isinstance(n, ast.Attribute) and _TRAINER_NAME.search(n.attr))
            or (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and _TRAINER_NAME.search(n.name))
            or (isinstance(n, ast.alias) and _TRAINER_NAME.search(n.name + (n.asname or "")))
            or (isinstance(n, ast.ImportFrom) and n.module and _TRAINER_NAME.search(n.module)))
    return hits


def test_trainer_names_outside_the_trainer_folders_only_shrink():
    found = {}
    for p in (ROOT / "nbtools").rglob("*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[1] == "trainers" or rel.name == "_trainer_folders.py":
            continue
        if n := _trainer_names(p):
            found[str(rel)] = n
    check_ratchet(found, TRAINER_NAMES_LEFT, "trainer names outside nbtools/trainers/",
                  "ask the trainer or its layout (nbtools.trainers.get(cfg), nbtools.trainers.layouts()) instead",
                  "TRAINER_NAMES_LEFT")


def test_the_trainer_name_walk_sees_names_in_code_not_in_prose(tmp_path):
    src = tmp_path / "x.py"
    src.write_text('"""verl and NeMo-RL in a docstring."""\nfrom nbtools.checkpoints import latest_verl\n'
                   'if kind == "verl":\n    pass\n# nemo_rl in a comment\n')
    assert _trainer_names(src) == 2  # the imported name and the constant


def test_a_trainer_binds_its_experiment_once():
    """A trainer is built for one experiment (``trainers.get(cfg)``) and its verbs read that one: none takes ``cfg``
    again (only the classmethods asked before an experiment is valid, ``check`` and ``code_source``, do), so a caller
    cannot hand it another experiment than the one it was built for."""
    import inspect

    classes = [trainers.Trainer, trainers.Rehearsal, *(trainers.trainer_class(k) for k in trainers.names())]
    takes_cfg = {f"{cls.__name__}.{name}" for cls in classes for name, fn in inspect.getmembers(cls, callable)
                 if not name.startswith("_") and not isinstance(inspect.getattr_static(cls, name), classmethod)
                 and "cfg" in inspect.signature(fn).parameters}
    assert not takes_cfg, f"verbs that take the experiment again (read self.cfg instead): {sorted(takes_cfg)}"
    for name in ("gke-b200-gemma3-1b.yaml", "gke-b200-verl.yaml"):
        cfg = _cfg(name)
        assert trainers.get(cfg).cfg is cfg
    local = _cfg("local.yaml", backend="local")
    t = trainers.get(local)
    assert t.cfg is local and t.imitates.cfg is local and t.output_dirs() == t.imitates.output_dirs()


def test_the_trainer_states_its_hardware_for_the_card():
    """What the card read from a ``miniature`` flag, the trainer says itself: the rehearsal's CPU ranks, a cluster
    trainer's image, nodes and GPUs."""
    local = trainers.get(_cfg("local.yaml", backend="local")).hardware()
    assert local.rehearsal and local.gpus is None and local.cluster.startswith("local: ") and local.example[0] == "max 3 0 6"
    cfg = _cfg("gke-b200-verl.yaml")
    gke = trainers.get(cfg).hardware()
    assert not gke.rehearsal and gke.gpus == cfg.cluster.total_gpus and gke.image == cfg.images.resolved_image
    assert "backend `gke`" in gke.cluster and "\\boxed{}" in gke.example[0]
