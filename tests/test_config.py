"""nbtools.config: every experiment file round-trips; every validation path reports key, value and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nbtools import config
from nbtools.config import ConfigError, Secret, SecretRef

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))


def test_experiment_files_exist():
    names = {p.name for p in EXPERIMENTS}
    assert {"local.yaml", "gke-b200-gemma3-1b.yaml", "gke-h200-qwen.yaml"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_round_trip(path, tmp_path):
    cfg = config.load(path)
    out = tmp_path / path.name
    config.dump(cfg, out)
    again = config.load(out)
    assert config.to_dict(again) == config.to_dict(cfg)
    assert again.config_hash() == cfg.config_hash()
    assert again == cfg


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_yaml_opens_with_the_command_that_runs_it(path):
    head = path.read_text().splitlines()[:3]
    assert any("Run it:" in line for line in head), f"{path.name}: first lines say how to run it"


def test_derived_values():
    b200 = config.load(ROOT / "experiments/gke-b200-gemma3-1b.yaml")
    assert b200.cluster.machine_type == "a4-highgpu-8g"
    assert b200.cluster.nccl_tuner_config == "/usr/local/gib/configs/tuner_config_a4.txtpb"
    assert b200.images.resolved_image == "nvcr.io/nvidia/nemo-rl:v0.7.0"
    assert b200.images.resolved_ray_version == "2.55.1"
    h200 = config.load(ROOT / "experiments/gke-h200-qwen.yaml")
    assert h200.cluster.machine_type == "a3-ultragpu-8g"
    assert h200.cluster.nccl_tuner_config.endswith("tuner_config_a3u.txtpb")
    assert h200.images.resolved_ray_version == "2.49.2"
    assert h200.cluster.total_gpus == 16


def test_local_paths_resolve_under_runs_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    cfg = config.load(ROOT / "experiments/local.yaml")
    assert cfg.runs_dir == tmp_path.resolve()
    assert cfg.log_dir == str(tmp_path.resolve() / "local-rehearsal" / "logs")
    assert cfg.checkpoint_dir.startswith(str(tmp_path.resolve()))
    monkeypatch.delenv("NBTOOLS_RUNS_DIR")
    cfg = config.load(ROOT / "experiments/local.yaml")
    assert cfg.runs_dir == (ROOT / "runs").resolve()


def test_backend_override_and_submission_id_is_stable():
    a = config.load(ROOT / "experiments/local.yaml")
    b = config.load(ROOT / "experiments/local.yaml", backend="local")
    assert a.submission_id == b.submission_id and a.submission_id.startswith("local-rehearsal-")
    c = a.replace(**{"grpo.max_num_steps": 10})
    assert c.grpo.max_num_steps == 10 and c.submission_id != a.submission_id


def _write(tmp_path, data) -> Path:
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_missing_file_names_neighbours(tmp_path):
    (tmp_path / "good.yaml").write_text("name: x\n")
    with pytest.raises(ConfigError, match="does not exist.*good.yaml"):
        config.load(tmp_path / "nope.yaml")


def test_invalid_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(p)


def test_top_level_not_mapping(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        config.load(p)


def test_all_problems_reported_at_once(tmp_path):
    p = _write(tmp_path, {
        "name": "My Exp!",
        "backend": "gkee",
        "grpo": {"num_prompts_per_step": "many", "max_num_steps": 0, "seeed": 1},
        "cluster": {"gpu_type": "nvidia-a100"},
        "checkpointing": {"enabled": "yes"},
    })
    with pytest.raises(ConfigError) as ei:
        config.load(p)
    msg = str(ei.value)
    assert "backend: 'gkee' is not allowed; allowed: 'local', 'gke', 'ray' (did you mean 'gke'?)" in msg
    assert "grpo.num_prompts_per_step: expected an integer, got 'many'" in msg
    assert "grpo.seeed: unknown key" in msg and "did you mean `grpo.seed`" in msg
    assert "cluster.gpu_type: 'nvidia-a100' is not allowed" in msg and "nvidia-b200" in msg
    assert "checkpointing.enabled: expected true or false" in msg
    # cross-field rules run too, even though type errors exist elsewhere
    assert "name: 'My Exp!' is not usable" in msg and "grpo.max_num_steps: 0 must be >= 1" in msg
    assert len(ei.value.problems) == 7


@pytest.mark.parametrize(
    "data, match",
    [
        ({"name": "Bad Name"}, r"name: 'Bad Name' is not usable.*fix: e.g. `name: bad-name`"),
        ({}, r"name: required key is missing"),
        ({"name": "x", "backend": "ray"}, r"ray.address: missing for backend 'ray'"),
        ({"name": "x", "ray": {"address": "ray://h:10001"}}, r"not a dashboard URL.*not ray://"),
        ({"name": "x", "ray": {"dashboard_port": 70000}}, r"ray.dashboard_port: 70000 is not a TCP port"),
        ({"name": "x", "backend": "gke", "storage": {"bucket": "b"}}, r"gcp.project: missing for backend 'gke'"),
        ({"name": "x", "backend": "gke", "gcp": {"project": "p", "region": "us-east5", "zone": "us-central1-a"}, "storage": {"bucket": "b"}}, r"gcp.zone: 'us-central1-a' is not in region"),
        ({"name": "x", "backend": "gke", "gcp": {"project": "p"}}, r"storage.bucket: missing for gcsfuse"),
        ({"name": "x", "backend": "gke", "gcp": {"project": "p"}, "storage": {"kind": "lustre"}}, r"storage.lustre: instance and ip are required"),
        ({"name": "x", "storage": {"bucket": "gs://b"}}, r"includes the gs:// scheme; fix: `bucket: b`"),
        ({"name": "x", "storage": {"mount_path": "data"}}, r"storage.mount_path: 'data' must be absolute"),
        ({"name": "x", "cluster": {"provisioning": "reservation"}}, r"cluster.reservation: required"),
        ({"name": "x", "cluster": {"gpus_per_node": 4}}, r"cluster.gpus_per_node: 4 does not match nvidia-b200.*set `cluster.gpus_per_node` to 8"),
        ({"name": "x", "cluster": {"worker_replicas": 0}}, r"cluster.worker_replicas: 0 must be >= 1"),
        ({"name": "x", "grpo": {"num_generations_per_prompt": 1}}, r"group of at least 2"),
        ({"name": "x", "grpo": {"kl_penalty": -1}}, r"grpo.kl_penalty: -1.0 must be >= 0"),
        ({"name": "x", "checkpointing": {"metric_name": "accuracy"}}, r"must be `val:<name>` or `train:<name>`"),
        ({"name": "x", "checkpointing": {"dtensor_v2": False}}, r"only valid with dtensor_v2: true"),
        ({"name": "x", "checkpointing": {"model_save_format": None}}, r"null needs dtensor_v2: false"),
        ({"name": "x", "secrets": {"hf_token": {}}}, r"secrets.hf_token: names neither"),
        ({"name": "x", "secrets": {"hf_token": {"env": "hf_abcdefghijklmnop-xyz"}}}, r"put the NAME of the env var here"),
        ({"name": "x", "secrets": {"hf_token": {"env": "my-token"}}}, r"must be the NAME of an environment variable"),
        ({"name": "x", "secrets": {"hf_token": {"k8s_secret": "hf"}}}, r"secrets.hf_token.key: required"),
        ({"name": "x", "trainer": {"colocated": False}}, r"non-colocated generation needs its resources"),
        ({"name": "x", "trainer": {"overrides": ["grpo.max_num_steps"]}}, r"is not a Hydra override"),
        ({"name": "x", "rehearsal": {"ranks": 0}}, r"rehearsal.ranks: 0 must be >= 1"),
        ({"name": "x", "rehearsal": {"hidden_size": 66}}, r"not divisible by num_heads"),
        ({"name": "x", "grpo": "fast"}, r"grpo: expected a mapping"),
        ({"name": "x", "trainer": {"overrides": "a=b"}}, r"expected a list"),
        ({"name": "x", "trainer": {"vllm_kwargs": [1]}}, r"trainer.vllm_kwargs: expected a mapping"),
        ({"name": "x", "grpo": {"kl_penalty": "lots"}}, r"expected a number"),
        ({"name": "x", "gcp": {"project": ["p"]}}, r"gcp.project: expected a string"),
    ],
)
def test_each_validation_error(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        config.load(_write(tmp_path, data))


def test_secrets_are_referenced_never_stored(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_supersecretvalue1234567890")
    cfg = config.load(ROOT / "experiments/gke-b200-gemma3-1b.yaml")
    dumped = config.dump(cfg)
    assert "supersecret" not in dumped and "supersecret" not in repr(cfg) and "supersecret" not in cfg._repr_markdown_()
    value = cfg.secrets.hf_token.value()
    assert isinstance(value, Secret)
    assert "supersecret" not in repr(value) and "supersecret" not in str(value) and "supersecret" not in f"{value}"
    assert value.reveal() == "hf_supersecretvalue1234567890"
    with pytest.raises(TypeError, match="cannot be pickled"):
        import pickle

        pickle.dumps(value)
    monkeypatch.delenv("HF_TOKEN")
    assert SecretRef(env="HF_TOKEN").value() is None


def test_repr_markdown_summarises():
    cfg = config.load(ROOT / "experiments/gke-h200-qwen.yaml")
    md = cfg._repr_markdown_()
    assert "a3-ultragpu-8g" in md and cfg.config_hash() in md
