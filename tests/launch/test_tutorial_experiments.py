"""Issues 27 item 8 and 42 item 2: each tutorial's run as the tutorial wrote it, one file per run
(experiments/tutorial-00N-*.yaml, the one source of truth: nbtools/data/recipes.yaml is generated from them),
listed in the README, passing ``nbtools launch FILE --lint-only`` with no blocking finding and ``nbtools fit FILE``
(or, on hardware the tutorial allows but the run does not fit, saying why); nbtools' recommended variants beside them
name the tutorial file and comment each difference."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools
from nbtools.launch import recipes

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "tutorial-000-gemma3-1b-it": {"images.nemo_rl_version": "v0.5.0", "grpo.max_new_tokens": 1024,
                                  "grpo.max_num_steps": 30, "trainer.vllm_kwargs": {"block_size": 32}},
    "tutorial-002-verl-qwen2.5-32b": {"grpo.kl_penalty": 0.0, "cluster.worker_cpu": "220",
                                      "cluster.worker_memory": "2800Gi", "logging.tensorboard": False,
                                      "trainer.env_vars": {"NCCL_NET_PLUGIN": "/usr/local/gib/lib64/libnccl-net_internal.so",
                                                           "NCCL_DEBUG": "INFO"}},
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
    cfg = nbtools.config.load(path)
    assert nbtools.config.to_dict(cfg) == nbtools.config.to_dict(recipes.get(name)), "regenerate: python tools/gen_recipes.py"
    for key, want in FILES[name].items():
        assert _get(cfg, key) == want, key
    if cfg.logging.wandb:  # notebook 04 reads TensorBoard event files: kept on beside W&B
        assert cfg.logging.tensorboard
    code, text = cli("launch", path, "--lint-only")
    assert code == 0 and " 0 blocking" in text.splitlines()[0], text
    code, text = cli("fit", path)
    assert code == 0, text
    assert f"experiments/{name}.yaml" in (ROOT / "README.md").read_text()


def test_every_tutorial_has_its_file_and_the_packaged_recipes_are_generated_from_them():
    files = sorted(p.stem for p in (ROOT / "experiments").glob("tutorial-*.yaml"))
    assert files == sorted(FILES) and {f[:12] for f in files} == {f"tutorial-00{i}" for i in range(5)}
    packaged = (ROOT / "nbtools" / "data" / "recipes.yaml").read_text()
    assert packaged == recipes.from_files(ROOT / "experiments"), "regenerate it: python tools/gen_recipes.py"
    assert recipes.names() == files


def test_tutorial_002_as_written_only_warns_of_its_ignored_kl_key(cli):
    """The blog's algorithm.kl_ctrl.kl_coef=0.001: a warning naming the verl tag and the reading source, not a refusal."""
    code, text = cli("launch", ROOT / "experiments" / "tutorial-002-verl-qwen2.5-32b.yaml", "--lint-only")
    assert code == 0, text
    assert "[warning] trainer.overrides: algorithm.kl_ctrl.kl_coef=0.001 has no effect in verl v0.7.0" in text
    assert "verl/trainer/ppo/ray_trainer.py" in text and "actor_rollout_ref.actor.use_kl_loss=false" in text


def test_tutorial_003_on_a100_nodes_is_judged_as_a100s_and_says_why_it_does_not_fit(cli):
    """Tutorial 003 allows "2x A100 (or newer)": on A100 80GB its micro-batch 4 x 4096 without checkpointing does not
    fit, and fit names the memory and the term, not an H200's verdict."""
    code, text = cli("fit", ROOT / "experiments" / "tutorial-003-qwen3-1.7b-deepscaler.yaml", "--gpu", "a100-80")
    assert code == 1 and "NVIDIA A100 80GB" in text and "DOES-NOT-FIT" in text, text
    assert "micro-batch 4 x 4096 tokens, activation checkpointing off" in text


@pytest.mark.parametrize("variant, tutorial", [("gke-b200-gemma3-1b", "tutorial-000-gemma3-1b-it"),
                                               ("gke-b200-verl", "tutorial-002-verl-qwen2.5-32b"),
                                               ("gke-h200-qwen", "tutorial-003-qwen3-1.7b-deepscaler")])
def test_each_recommended_variant_names_its_tutorial_and_comments_each_difference(variant, tutorial):
    text = (ROOT / "experiments" / f"{variant}.yaml").read_text()
    assert f"nbtools' recommended variant of experiments/{tutorial}.yaml" in text
    import yaml

    def flat(d, p=""):
        return {k2: v2 for k, v in d.items()
                for k2, v2 in (flat(v, f"{p}{k}.").items() if isinstance(v, dict) and v else {f"{p}{k}": v}.items())}

    a, b = flat(yaml.safe_load((ROOT / "experiments" / f"{tutorial}.yaml").read_text())), flat(yaml.safe_load(text))
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    skip = {"name", "gcp.project", "storage.bucket", "trainer.kind", "cluster.mode"}  # placeholders and spelled-out defaults
    differ = {k.split(".")[-1] if k.startswith("trainer.env_vars") else k for k in a.keys() | b.keys()
              if a.get(k) != b.get(k) and k not in skip and not k.endswith(("_dir", "log_dir"))}
    unexplained = sorted(k for k in differ if k.rsplit(".", 1)[-1] not in header and k not in header
                         and not k.startswith(("trainer.env_vars", "secrets.", "cluster.", "gcp.", "storage.", "ray.")))
    assert not unexplained, f"{variant}: differences without a comment: {unexplained}"


# Tutorial 002's runtime-env.yaml, its NCCL/Gloo variables as the blog prints them ("Scaling Reinforcement Learning with
# verl on GKE"; esaaren/verl-on-gke job/runtime-env.yaml): the plugin library named directly, no NCCL_NET.
BLOG_002_NCCL = {
    "NCCL_DEBUG": "INFO", "NCCL_NET_PLUGIN": "/usr/local/gib/lib64/libnccl-net_internal.so", "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_P2P_NET_CHUNKSIZE": "131072", "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_ADAPTIVE_ROUTING": "1", "NCCL_IB_QPS_PER_CONNECTION": "4", "NCCL_IB_TC": "52", "NCCL_IB_FIFO_TC": "84",
    "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a4.txtpb", "GLOO_SOCKET_IFNAME": "eth0",
}


def test_tutorial_002_job_env_is_the_blogs_without_nbtools_own_network_choice():
    """#42 left: nbtools added GKE's NCCL_NET=gIB next to the blog's NCCL_NET_PLUGIN, two choices of NCCL's network
    the blog never makes together; the user's plugin library now replaces nbtools' NCCL_NET."""
    from nbtools.launch import runtime_env

    env = runtime_env.env_vars(nbtools.config.load(ROOT / "experiments" / "tutorial-002-verl-qwen2.5-32b.yaml"))
    assert {k: env.get(k) for k in BLOG_002_NCCL} == BLOG_002_NCCL
    assert "NCCL_NET" not in env and "/usr/local/nvidia/lib64" in env["LD_LIBRARY_PATH"]
    assert runtime_env.env_vars(nbtools.config.load(ROOT / "experiments" / "gke-b200-verl.yaml"))["NCCL_NET"] == "gIB"


@pytest.mark.parametrize("net, severity", [("IB", "blocking"), ("gIB", "warning")])
def test_nccl_net_beside_nccl_net_plugin_is_a_finding_that_names_the_fix(net, severity):
    path = ROOT / "experiments" / "tutorial-002-verl-qwen2.5-32b.yaml"
    env = {**nbtools.config.load(path).trainer.env_vars, "NCCL_NET": net}
    report = nbtools.launch.lint(nbtools.config.load(path, overrides={"trainer.env_vars": env}), code_present=True)
    found = [f for f in report.findings if f.rule == "nccl-net"]
    assert [(f.severity, f.key) for f in found] == [(severity, "trainer.env_vars.NCCL_NET")]
    assert "remove `trainer.env_vars.NCCL_NET` and keep `NCCL_NET_PLUGIN: /usr/local/gib/lib64/libnccl-net_internal.so`" \
        in found[0].fix
    assert not [f for f in nbtools.launch.lint(nbtools.config.load(path), code_present=True).findings
                if f.rule == "nccl-net"]
