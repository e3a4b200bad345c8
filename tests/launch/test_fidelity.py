"""Issue 14, launch side: verl's real KL switch and its source at /data/verl (items 4, 5), checked against verl's and
NeMo-RL's own sources; the lint rules that catch what those trainers would silently ignore."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import nbtools
from nbtools.launch import lint
from nbtools.trainers import verl

ROOT = Path(__file__).resolve().parents[2]


def _cfg(name="gke-b200-verl.yaml", **over):
    cfg = nbtools.config.load(ROOT / "experiments" / name, backend="gke")
    return cfg.replace(**over) if over else cfg


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))


def _rules(cfg, **kw):
    kw.setdefault("existing_steps", [])
    kw.setdefault("client_ray_version", cfg.images.resolved_ray_version)
    kw.setdefault("cluster_gpus", cfg.cluster.total_gpus)
    return lint(cfg, **kw)


def _findings(report, rule):
    return [f for f in report.findings if f.rule == rule]


# -- item 4: verl's KL ----------------------------------------------------------------------------------------

def test_grpo_kl_penalty_becomes_verls_kl_loss():
    # verl verl/trainer/config/ppo_trainer.yaml (volcengine/verl@008db456): actor.use_kl_loss "True for GRPO",
    # kl_loss_coef / kl_loss_type: low_var_kl "for grpo"; algorithm.kl_ctrl.kl_coef is read only under
    # algorithm.use_kl_in_reward (verl/trainer/ppo/ray_trainer.py `if self.config.algorithm.use_kl_in_reward:`).
    eff = verl.effective(_cfg())
    assert eff["actor_rollout_ref.actor.use_kl_loss"] == "true"
    assert eff["actor_rollout_ref.actor.kl_loss_coef"] == "0.001" and eff["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert "algorithm.kl_ctrl.kl_coef" not in eff and "algorithm.use_kl_in_reward" not in eff
    off = verl.effective(_cfg(**{"grpo.kl_penalty": 0.0}))
    assert off["actor_rollout_ref.actor.use_kl_loss"] == "false" and "actor_rollout_ref.actor.kl_loss_coef" not in off
    assert "actor_rollout_ref.actor.use_kl_loss=true" in verl.command(_cfg())


def test_lint_warns_of_a_kl_coefficient_verl_would_ignore():
    """Issue 42 item 2: tutorial 002's own key is a warning naming the tag and the source path, not a refusal."""
    assert not _findings(_rules(_cfg()), "verl-kl")
    own = list(_cfg().trainer.overrides)  # the experiment's micro-batch keys: without them verl (and the lint) refuse it
    tutorial = _cfg(**{"grpo.kl_penalty": 0.0, "trainer.overrides": [*own, "algorithm.kl_ctrl.kl_coef=0.001"]})
    report = _rules(tutorial)
    f = _findings(report, "verl-kl")  # tutorial 002's own command line: a silent no-op KL
    assert f and f[0].severity == "warning" and "use_kl_in_reward" in f[0].message and "grpo.kl_penalty: 0.001" in f[0].fix
    assert "no effect in verl v0.7.0" in f[0].message and "verl/trainer/ppo/ray_trainer.py" in f[0].message
    assert report.ok, str(report)
    in_reward = tutorial.replace(**{"trainer.overrides": [*own, "algorithm.kl_ctrl.kl_coef=0.001",
                                                          "algorithm.use_kl_in_reward=true"]})
    assert not _findings(_rules(in_reward), "verl-kl")
    switched_off = _cfg(**{"trainer.overrides": ["actor_rollout_ref.actor.use_kl_loss=false"]})
    f = _findings(_rules(switched_off), "verl-kl")
    assert f and f[0].key == "grpo.kl_penalty" and "kl_loss_coef=0.001 is ignored" in f[0].message


# -- item 5: verl's source at /data/verl ----------------------------------------------------------------------

def test_the_plan_copies_a_pinned_verl_release_to_where_the_job_cds(tmp_path):
    cfg = _cfg()
    plan = nbtools.gke.plan(cfg)
    names = [s.name for s in plan.steps]
    assert names.index("storage") < names.index("verl-fetch") < names.index("verl-source")
    sync = plan["verl-source"].command
    assert sync[:3] == ("gcloud", "storage", "rsync") and sync[-2] == f"gs://{cfg.storage.bucket}/verl"
    assert verl.code_dir(cfg) == "/data/verl" == cfg.storage.mount_path + "/verl"  # the bucket is mounted at /data
    assert verl.command(cfg).startswith("cd /data/verl && ") and verl.prepare_command(cfg).startswith("cd /data/verl && ")
    assert plan["verl-source"].expect == ("v0.7.0",) and "--branch=v0.7.0" in plan["verl-fetch"].command[-1]
    assert "verl-source" not in [s.name for s in nbtools.gke.plan(_cfg("gke-b200-gemma3-1b.yaml")).steps]
    # the fetch really clones a tag without .git and marks it (a local repository stands in for GitHub)
    repo = tmp_path / "verl-repo"
    (repo / "verl" / "trainer").mkdir(parents=True)
    (repo / "verl" / "trainer" / "main_ppo.py").write_text("# verl\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(repo)]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "v"], ["tag", "v9.9.9"]):
        subprocess.run(git + args, check=True, capture_output=True)
    fetch = nbtools.gke.plan(cfg.replace(**{"trainer.verl_repo": str(repo), "trainer.verl_ref": "v9.9.9"}))["verl-fetch"]
    subprocess.run(fetch.command, check=True, capture_output=True)
    tree = Path(fetch.check[1]).parent
    assert (tree / "verl" / "trainer" / "main_ppo.py").is_file() and not (tree / ".git").exists()
    assert Path(fetch.check[1]).read_text() == "v9.9.9" and tree.name == "verl"
    with pytest.raises(nbtools.errors.ConfigError, match="does not pin verl"):
        _cfg(**{"trainer.verl_ref": "main"})


def test_lint_reports_missing_verl_source(tmp_path):
    cfg = _cfg()
    unknown = _findings(_rules(cfg), "verl-source")
    assert unknown and unknown[0].severity == "warning" and "verl-fetch + verl-source" in unknown[0].fix
    missing = _findings(_rules(cfg, code_present=lambda path: path != "/data/verl"), "verl-source")
    assert missing and missing[0].severity == "blocking" and "cd /data/verl" in missing[0].message
    assert not _findings(_rules(cfg, code_present=True), "verl-source")
    state = cfg.run_dir / "gke" / "provision-state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"kind": "provision", "steps": {"verl-source": {"status": "done"}}}))
    assert not _findings(_rules(cfg), "verl-source"), "the provisioning step ran from this machine"
    local = tmp_path / "mnt"
    (local / "verl").mkdir(parents=True)
    visible = cfg.replace(**{"storage.mount_path": str(local), "checkpointing.checkpoint_dir": f"{local}/c",
                             "logging.log_dir": f"{local}/l"})
    f = _findings(_rules(visible), "verl-source")
    assert f and f[0].severity == "blocking", "an empty checkout dir visible here is missing verl"
    (local / "verl" / "verl" / "trainer").mkdir(parents=True)
    (local / "verl" / "verl" / "trainer" / "main_ppo.py").write_text("")
    assert not _findings(_rules(visible), "verl-source")


def test_the_verl_experiment_is_first_class():
    cfg = _cfg()
    assert cfg.trainer.kind == "verl" and cfg.backend == "gke"
    report = _rules(cfg)
    assert report.ok, str(report)
    d = nbtools.gke.destroy_plan(cfg)
    assert [s.name for s in d.steps][:3] == ["raycluster", "gpu-pool", "cluster"]
    assert "verl-fetch" not in [s.name for s in d.steps], "the verl copy is data in the bucket: kept unless it goes"
    assert (ROOT / "manifests" / f"{cfg.name}.yaml").is_file(), "run `make manifests`"


# -- item 10: sequence lengths --------------------------------------------------------------------------------

def test_lint_relates_prompt_generation_total_and_model_len():
    # NeMo-RL v0.7.0 (tests/assets/nemo-rl/v0.7.0, tag copies): grpo_math_1B.yaml sets max_new_tokens,
    # data.max_input_seq_length and vllm_cfg.max_model_len to ${policy.max_total_sequence_length}, but the recipe
    # recipes/llm/grpo-gemma3-1b-it-1n8g-fsdp2tp1.yaml pins max_new_tokens: 512 and max_input_seq_length: 512.
    b200 = _cfg("gke-b200-gemma3-1b.yaml")
    assert b200.model.max_total_sequence_length == 2048 and b200.grpo.max_new_tokens == 1536, "the example is fixed"
    assert not _findings(_rules(b200), "sequence-lengths")
    raised_only = b200.replace(**{"grpo.max_new_tokens": None})  # the example before: total 2048, recipe's 512 kept
    f = _findings(_rules(raised_only), "sequence-lengths")
    assert [x.key for x in f] == ["grpo.max_new_tokens"] and "2048 is never reached" in f[0].message
    assert f[0].fix == "set `grpo.max_new_tokens: 1536` (prompt + generation = 2048)"
    too_long = b200.replace(**{"grpo.max_new_tokens": 4096})
    f = _findings(_rules(too_long), "sequence-lengths")
    assert any("exceeds vLLM's max_model_len 2048" in x.message and "1536" in x.fix for x in f)
    cut = b200.replace(**{"trainer.vllm_cfg": {"max_model_len": 1024}, "grpo.max_new_tokens": 512})
    assert {x.key for x in _findings(_rules(cut), "sequence-lengths")} >= {"trainer.vllm_cfg.max_model_len"}


def test_eval_max_model_len_is_a_parameter_and_unequal_settings_are_flagged(monkeypatch):
    from nbtools.evals import flow
    from nbtools.evals.parse import ScoreBlock

    cfg = _cfg("gke-b200-gemma3-1b.yaml")
    seen = {}

    class Stop(Exception):
        pass

    def build(cfg, model, **kw):  # stops evaluate() before it submits: only the wiring is under test here
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(flow, "build_eval_job", build)  # flow's own name: it imports the builder from evals.job
    with pytest.raises(Stop):
        flow.evaluate(cfg, "baseline", max_model_len=8192)
    assert seen["max_model_len"] == 8192
    monkeypatch.undo()  # the real builder again
    assert "generation.vllm_cfg.max_model_len=8192" in nbtools.evals.eval_jobs(cfg, max_model_len=8192)[1].entrypoint

    def block(name, tokens, score):  # sunbc0120's MATH-500 blocks: 0.4020 and 0.4640 at max_new_tokens=8192
        return ScoreBlock(model_name=name, dataset_name="math500", max_new_tokens=tokens, temperature=0.0, top_p=1.0,
                          top_k=-1, seed=42, metric="pass@1", num_tests_per_prompt=1, score=score,
                          numerator=score * 500, denominator=500)

    same = nbtools.evals.compare(block("gemma-3-1b-it", 8192, 0.402), block("merged", 8192, 0.464))
    assert not [n for n in same.notes if "MISMATCH" in n]
    with pytest.warns(UserWarning, match="different settings"):
        unequal = nbtools.evals.compare(block("gemma-3-1b-it", 2048, 0.402), block("merged", 8192, 0.464))
    assert any(n.startswith("MISMATCH") and "max_new_tokens 2048 vs 8192" in n for n in unequal.notes)


# -- item 11: `+key` overrides unknown to the release, and known no-ops ----------------------------------------

def test_lint_warns_on_added_keys_the_release_does_not_have():
    # The release's key table = every key of its GRPO configs (tests/assets/nemo-rl/<tag>, copied at the tag, packed
    # into nbtools/data/nemo_rl_keys_<tag>.json): checkpointing.save_optimizer first appears after v0.5.0.
    from nbtools.trainers import _tree, nemo_rl

    assert "checkpointing.save_optimizer" not in _tree.version_keys("v0.5.0")
    assert "checkpointing.save_optimizer" in _tree.version_keys("v0.7.0")
    v05 = _cfg("gke-h200-qwen.yaml", **{"checkpointing.save_optimizer": False})
    assert "+checkpointing.save_optimizer=false" in [o.render() for o in nemo_rl.overrides(v05)]
    f = _findings(_rules(v05), "unknown-added-keys")
    assert [x.key for x in f] == ["checkpointing.save_optimizer"] and "not a key of NeMo-RL v0.5.0 (it is one in v0.7.0)" in f[0].message
    v07 = _cfg("gke-h200-qwen.yaml", **{"checkpointing.save_optimizer": False, "images.nemo_rl_version": "v0.7.0",
                                        "data.validation": None})
    assert not _findings(_rules(v07), "unknown-added-keys")
    typo = _cfg("gke-h200-qwen.yaml", **{"trainer.overrides": ["+grpo.max_num_stepz=3", "+policy.generation.vllm_kwargs.seed=1"]})
    f = _findings(_rules(typo), "unknown-added-keys")
    assert [x.key for x in f] == ["trainer.overrides[0]"], "vllm_kwargs is an open dict handed to vLLM"


def test_enable_thinking_is_a_no_op_for_gemma3_templates():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    assets = ROOT / "tests" / "assets" / "chat-templates"
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders templates
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(ValueError(msg))
    msgs = [{"role": "user", "content": "What is 2+2?"}]

    def render(name, **kw):
        return env.from_string((assets / name).read_text()).render(messages=msgs, add_generation_prompt=True,
                                                                   bos_token="<bos>", **kw)

    assert render("gemma-3-it.jinja", enable_thinking=True) == render("gemma-3-it.jinja", enable_thinking=False)
    assert render("qwen3.jinja", enable_thinking=True) != render("qwen3.jinja", enable_thinking=False)
    gemma = _cfg("gke-b200-gemma3-1b.yaml", **{"model.chat_template_kwargs": {"enable_thinking": True}})
    f = _findings(_rules(gemma), "unknown-added-keys")
    assert f and f[0].key == "model.chat_template_kwargs.enable_thinking" and "gemma-3-1b-it" in f[0].message
    assert not _findings(_rules(_cfg("gke-b200-gemma3-1b.yaml")), "unknown-added-keys"), "the example no longer sets it"
    qwen3 = _cfg("gke-h200-qwen.yaml", **{"model.chat_template_kwargs": {"enable_thinking": False}})
    assert not _findings(_rules(qwen3), "unknown-added-keys")


def test_the_verl_source_steps_run_on_the_gcloud_double(tmp_path):
    """verl-fetch, then verl-source (``gcloud storage rsync``) and its check (``gcloud storage cat`` of the marker)
    through the one gcloud double on the GCS emulator: uploaded once, unchanged files not again, a file gone from the
    release removed from the bucket, and the check reads the pinned tag back."""
    from sim_gke import BUCKET, PROJECT, SimGke

    repo = tmp_path / "verl-repo"
    (repo / "verl" / "trainer").mkdir(parents=True)
    (repo / "verl" / "trainer" / "main_ppo.py").write_text("# verl\n")
    (repo / "README.md").write_text("verl\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(repo)]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "v"], ["tag", "v9.9.9"]):
        subprocess.run(git + args, check=True, capture_output=True)
    cfg = _cfg(**{"trainer.verl_repo": str(repo), "trainer.verl_ref": "v9.9.9", "storage.bucket": BUCKET,
                  "gcp.project": PROJECT})
    with SimGke(tmp_path / "sim", ray=False, mirror=False, isolate=False, provisioned=True) as sim, sim.activated():
        plan = nbtools.gke.plan(cfg)
        fetch, sync = plan["verl-fetch"], plan["verl-source"]
        subprocess.run(fetch.command, check=True, capture_output=True)
        assert subprocess.run(sync.check, capture_output=True, text=True).returncode == 1  # nothing there yet

        def run():
            r = subprocess.run(sync.command, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            return r.stderr

        first = run()
        assert first.count("Copying file://") == 3  # main_ppo.py, README.md, the .nbtools-verl-ref marker
        check = subprocess.run(sync.check, capture_output=True, text=True)
        assert check.returncode == 0 and check.stdout.strip() == "v9.9.9" == sync.expect[0]
        assert "Copying" not in run()  # unchanged: nothing uploaded again
        (Path(fetch.check[1]).parent / "README.md").unlink()
        assert f"Removing gs://{BUCKET}/verl/README.md" in run()
        assert sorted(sim.gcs.fs.find(f"{BUCKET}/verl")) == [f"{BUCKET}/verl/.nbtools-verl-ref",
                                                               f"{BUCKET}/verl/verl/trainer/main_ppo.py"]
