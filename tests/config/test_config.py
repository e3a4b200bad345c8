"""nbtools.config: every experiment file round-trips; every validation path reports key, value and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nbtools import config
from nbtools.config import ConfigError, Secret, SecretRef

ROOT = Path(__file__).resolve().parents[2]
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
    assert "checkpointing.enabled: expected true or false" in msg
    # cross-field rules run too, even though type errors exist elsewhere
    assert "name: 'My Exp!' is not usable" in msg and "grpo.max_num_steps: 0 must be >= 1" in msg
    # which GPUs are allowed is the backend's rule (gke: the machines it provisions; ray and local: the memory table),
    # so an unknown backend leaves cluster.gpu_type to be checked once the backend is named
    assert "cluster.gpu_type" not in msg and len(ei.value.problems) == 6


@pytest.mark.parametrize("backend, expected", [
    ("ray", "cluster.gpu_type: 'nvidia-a100' is not a GPU whose memory nbtools knows"),
    ("local", "cluster.gpu_type: 'nvidia-a100' is not a GPU whose memory nbtools knows"),
    ("gke", "cluster.gpu_type: 'nvidia-a100' is not a GPU the gke backend provisions"),
])
def test_each_backend_checks_the_gpu_type_against_its_own_list(tmp_path, backend, expected):
    """The backend's own check, one message per backend (the GPU table's rule lived outside the backends, skipping
    gke by name); reported with the backend's other problems."""
    p = _write(tmp_path, {"name": "x", "backend": backend, "cluster": {"gpu_type": "nvidia-a100"}})
    with pytest.raises(ConfigError) as ei:
        config.load(p)
    gpu = [x for x in map(str, ei.value.problems) if "cluster.gpu_type" in x]
    assert len(gpu) == 1 and expected in gpu[0], ei.value.problems


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
        ({"name": "x", "rehearsal": {"hidden_size": 65}}, r"not divisible by num_heads"),
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


# -- hostile configs: pasted tokens, duplicate keys, alias bombs, late failures made early ---------------------

SENTINELS = {  # token-shaped values that must never be echoed
    "hf": "hf_Sent1nelT0kenAbCdEfGhIjKlMnOpQrStUv",
    "wandb": "0123456789abcdef0123456789abcdef5e471e1a",
    "github": "ghp_Sent1nelT0kenAbCdEfGhIjKlMnOpQrStUv12",
    "openai": "sk-proj-Sent1nelT0kenAbCdEfGhIj",
    "random": "Xk9vQ2mZ7pL4nR8sT1wY6uB3hJ5gF0dS",
}


def _gke(**extra) -> dict:
    data = yaml.safe_load((ROOT / "experiments/gke-b200-gemma3-1b.yaml").read_text())
    for key, value in extra.items():
        config._set_dotted(data, key, value)
    return data


@pytest.mark.parametrize("kind", list(SENTINELS))
@pytest.mark.parametrize("where", [
    "secrets.hf_token.env", "secrets.wandb_api_key.env", "secrets.hf_token.k8s_secret", "secrets.hf_token.key",
    "secrets.hf_token", "secrets", "hf_token", "secrets.github_token", "trainer.env_vars.MY_KEY",
])
def test_pasted_tokens_are_refused_and_never_echoed(tmp_path, kind, where):
    token = SENTINELS[kind]
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(_gke(**{where: token})))
    with pytest.raises(ConfigError) as ei:
        config.load(p)
    text = str(ei.value)
    assert token not in text and token[:12] not in text and f"<redacted, {len(token)} chars>" in text
    if where.endswith((".env", ".k8s_secret", ".key")):
        assert "NAME" in text and "export" in text


def test_token_as_key_and_yaml_errors_do_not_echo_it(tmp_path):
    token = SENTINELS["hf"]
    p = tmp_path / "exp.yaml"
    p.write_text(yaml.safe_dump(_gke(**{f"secrets.{token}": "x"})))
    with pytest.raises(ConfigError) as ei:
        config.load(p)
    assert token not in str(ei.value) and "secrets.<redacted" in str(ei.value)
    p.write_text(f"name: x\nsecrets:\n  hf_token: {{env: {token}\n")  # unclosed flow mapping
    with pytest.raises(ConfigError, match=r"not valid YAML: line \d+, column \d+") as ei:
        config.load(p)
    assert token not in str(ei.value)


def test_secret_names_still_pass():
    cfg = config.from_dict(_gke(**{"secrets.hf_token": {"env": "MY_HF_TOKEN", "k8s_secret": "hf-token.v2", "key": "token"},
                                    "trainer.env_vars": {"NCCL_DEBUG": "INFO", "HF_HUB_ENABLE_HF_TRANSFER": 1,
                                                         "TOKENIZERS_PARALLELISM": "false"}}))
    assert cfg.secrets.hf_token.env == "MY_HF_TOKEN" and cfg.trainer.env_vars["HF_HUB_ENABLE_HF_TRANSFER"] == "1"


@pytest.mark.parametrize("backend", ["local", "gke", "ray"])
def test_secrets_in_env_vars_are_config_problems_on_every_backend(backend):
    data = _gke(**{"backend": backend, "ray.address": "http://h:8265",
                   "trainer.env_vars": {"HF_TOKEN": "x", "WANDB_API_KEY": "y", "OK": SENTINELS["wandb"]}})
    with pytest.raises(ConfigError) as ei:
        config.from_dict(data)
    msg = str(ei.value)
    assert "trainer.env_vars.HF_TOKEN: secrets must not be job env vars" in msg and "secrets.hf_token: {env: HF_TOKEN}" in msg
    assert "trainer.env_vars.WANDB_API_KEY" in msg and "trainer.env_vars.OK: the value <redacted, 40 chars>" in msg
    assert SENTINELS["wandb"] not in msg


def test_runtime_env_refuses_secrets_on_the_local_backend_too():
    import dataclasses

    from nbtools.launch import runtime_env

    cfg = config.load(ROOT / "experiments/local.yaml")
    for env in ({"HF_TOKEN": "x"}, {"MY_KEY": SENTINELS["hf"]}):
        bad = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, env_vars=env))  # built without validation
        with pytest.raises(ConfigError, match="trainer.env_vars") as ei:
            runtime_env.env_vars(bad)
        assert SENTINELS["hf"] not in str(ei.value)


def test_lint_warns_when_a_referenced_env_var_is_unset(monkeypatch):
    from nbtools import launch

    monkeypatch.delenv("NBTOOLS_TEST_UNSET_TOKEN", raising=False)
    for backend, key in (("local", "secrets.hf_token.env"), ("ray", "secrets.hf_token")):
        cfg = config.load(ROOT / "experiments/local.yaml", backend=backend, overrides={
            "secrets.hf_token": {"env": "NBTOOLS_TEST_UNSET_TOKEN"}, "ray.address": "http://127.0.0.1:9"})  # nothing listens: refused at once
        report = launch.lint(cfg, existing_steps=[], cluster_gpus=cfg.cluster.total_gpus, client_ray_version="2.55.1")
        (f,) = [f for f in report.findings if f.key == key]
        assert f.severity == "warning" and "NBTOOLS_TEST_UNSET_TOKEN is" in f.message and "not set" in f.message
        monkeypatch.setenv("NBTOOLS_TEST_UNSET_TOKEN", SENTINELS["hf"])
        again = launch.lint(cfg, existing_steps=[], cluster_gpus=cfg.cluster.total_gpus, client_ray_version="2.55.1")
        assert not [f for f in again.findings if f.key == key]
        assert SENTINELS["hf"] not in str(again) + str(report)
        monkeypatch.delenv("NBTOOLS_TEST_UNSET_TOKEN")


def test_cross_field_rules_run_beside_type_errors_but_not_on_bad_fields(tmp_path):
    p = _write(tmp_path, {"name": "x", "grpo": {"seed": "abc"}, "cluster": {"gpus_per_node": 4},
                          "checkpointing": {"dtensor_v2": "no", "model_save_format": None}})
    with pytest.raises(ConfigError) as ei:
        config.load(p)
    msg = str(ei.value)
    assert "grpo.seed: expected an integer" in msg and "cluster.gpus_per_node: 4 does not match" in msg
    assert "checkpointing.dtensor_v2: expected true or false" in msg
    assert "model_save_format: null needs dtensor_v2" not in msg  # that rule reads the bad dtensor_v2: skipped
    assert len(ei.value.problems) == 3
    # a missing required key does not hide the rest
    with pytest.raises(ConfigError) as ei:
        config.from_dict({"ray": {"port": 0}, "grpo": {"kl_penalty": -1}})
    assert [p.key for p in ei.value.problems] == ["name", "ray.port", "grpo.kl_penalty"]


def test_duplicate_yaml_keys_are_refused_with_line_and_key(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: x\ngrpo:\n  seed: 1\n  max_num_steps: 5\n  seed: 2\n")
    with pytest.raises(ConfigError, match=r"line 5, column 3: duplicate key 'seed' \(first at line 3\); fix: keep one"):
        config.load(p)
    p.write_text("name: x\nname: y\n")
    with pytest.raises(ConfigError, match=r"line 2.*duplicate key 'name'"):
        config.load(p)
    # merge keys may be overridden: that is not a duplicate
    p.write_text("name: x\ntrainer:\n  vllm_cfg:\n    base: &b {gpu_memory_utilization: 0.5, x: 1}\n"
                 "    deep: {a: {<<: *b, x: 3}}\n    other: {<<: *b, x: 2}\n")
    assert config.load(p).trainer.vllm_cfg["other"] == {"gpu_memory_utilization": 0.5, "x": 2}


def test_yaml_alias_bomb_fails_fast(tmp_path):
    import time

    levels = ["    a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"    {c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    p = tmp_path / "bomb.yaml"
    p.write_text("name: bomb\ntrainer:\n  vllm_cfg:\n" + "\n".join(levels) + "\n")
    assert p.stat().st_size < 500
    t = time.perf_counter()
    with pytest.raises(ConfigError, match=r"expands to more than 100,000 values"):
        config.load(p)
    assert time.perf_counter() - t < 1.0
    p.write_text("name: x\ntrainer: {vllm_cfg: &r {a: *r}}\n")
    with pytest.raises(ConfigError, match="refers to itself"):
        config.load(p)
    shared = [list(range(10))] * 10
    for _ in range(5):
        shared = [shared] * 10  # 10^6 values through shared references, built in Python
    with pytest.raises(ConfigError, match="expands to more than"):
        config.from_dict({"name": "x", "trainer": {"vllm_cfg": {"a": shared}}})


def test_unreadable_experiment_files(tmp_path, monkeypatch):
    (tmp_path / "inside.yaml").write_text("name: x\n")
    with pytest.raises(ConfigError, match=r"is a directory, not an experiment file; fix: pass a YAML file, e.g."):
        config.load(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xff at offset 6\)"):
        config.load(binary)
    p = tmp_path / "locked.yaml"
    p.write_text("name: x\n")

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)  # root ignores chmod, so simulate it
    with pytest.raises(ConfigError, match=r"cannot read .*locked.yaml: permission denied; fix: make it readable"):
        config.load(p)


def test_rehearsal_failures_are_caught_at_load_time(tmp_path):
    local = yaml.safe_load((ROOT / "experiments/local.yaml").read_text())
    with pytest.raises(ConfigError, match=r"checkpointing.metric_name: 'val:reward' is not a val metric the local "
                       r"rehearsal logs \(it logs val:accuracy, val:avg_length\).*fix: e.g. `metric_name: val:accuracy`"):
        config.from_dict({**local, "checkpointing": {**local["checkpointing"], "metric_name": "val:reward"}})
    assert config.from_dict({**local, "checkpointing": {**local["checkpointing"], "metric_name": "train:reward"}})
    gke = _gke(**{"checkpointing.metric_name": "val:reward"})  # NeMo-RL logs other names: not checked there
    assert config.from_dict(gke).checkpointing.metric_name == "val:reward"
    with pytest.raises(ConfigError, match=r"grpo.num_prompts_per_step: 15 is not divisible by rehearsal.ranks 2.*"
                       r"fix: e.g. `num_prompts_per_step: 16`"):
        config.from_dict({**local, "grpo": {**local["grpo"], "num_prompts_per_step": 15}})


def test_rehearsal_metric_names_match_what_the_trainer_logs():
    """trainers.REHEARSAL_METRICS is a copy (the registry does not import the rehearsal's torch code); read the
    trainer's dict literals to keep it true."""
    import ast
    import inspect

    from nbtools.rehearsal import trainer

    src = ast.parse(inspect.getsource(trainer))
    fn = {n.name: n for n in ast.walk(src) if isinstance(n, ast.FunctionDef)}
    train = [r.value for r in ast.walk(fn["_train_metrics"]) if isinstance(r, ast.Return)][0]
    val = [a.value for a in ast.walk(fn["validate"]) if isinstance(a, ast.Assign) and isinstance(a.value, ast.Dict)
           and any(isinstance(t, ast.Name) and t.id == "metrics" for t in a.targets)][0]
    keys = {name: tuple(k.value for k in d.keys) for name, d in (("train", train), ("val", val))}
    from nbtools.trainers import REHEARSAL_METRICS

    assert keys == {k: tuple(v) for k, v in REHEARSAL_METRICS.items()}
