"""The `nbtools` CLI on bad input: one JSON document with --json, fixes in CLI words, no traceback, no token leaks.

Most calls run ``nbtools.cli.main`` in this process (it points fd 1 at stderr itself, so ``capfd`` sees exactly what
a terminal would); a few run the installed console script to prove the same end to end. Nothing here needs a Ray
head or the rehearsal run that tests/test_cli.py starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nbtools import cli

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "nbtools"
LOCAL = ROOT / "experiments" / "local.yaml"
GKE = ROOT / "experiments" / "gke-b200-gemma3-1b.yaml"
HF = "hf_Sent1nelT0kenAbCdEfGhIjKlMnOpQrStUv"
WANDB = "0123456789abcdef0123456789abcdef5e471e1a"


@pytest.fixture
def run(capfd, monkeypatch, tmp_path):
    """main(args) -> (exit status, stdout, stderr), with runs written under tmp_path."""
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("NBTOOLS_DEBUG", raising=False)

    def go(*args):
        capfd.readouterr()
        code = cli.main([str(a) for a in args])
        out, err = capfd.readouterr()
        assert "Traceback" not in out + err, err
        return code, out, err

    return go


def one_json(out: str) -> dict:
    """stdout holds exactly one JSON document (one line)."""
    assert out.count("\n") == 1, out
    return json.loads(out)


def _fake_step(tmp_path: Path) -> Path:
    step = tmp_path / "ckpt" / "step_3"
    (step / "policy" / "weights" / "model").mkdir(parents=True)
    (step / "policy" / "weights" / "model" / "shard-00001-model-00001-of-00001.safetensors").write_bytes(b"")
    return step


# -- KEY=VALUE after flags ---------------------------------------------------------------------------------------


def test_overrides_are_accepted_after_flags(run):
    code, out, _ = run("plan", GKE, "--script", "gcp.project=other-project", "--destroy", "cluster.name=late-override")
    assert code == 0 and "--project=other-project" in out and "late-override" in out
    code, out, _ = run("launch", LOCAL, "--lint-only", "grpo.max_num_steps=7", "--json", "rehearsal.num_train=64")
    d = one_json(out)
    assert code == 0 and "grpo.max_num_steps=7" in d["entrypoint"] and "rehearsal.num_train=64" in d["entrypoint"]


# -- --json: one document for every failure ----------------------------------------------------------------------


@pytest.mark.parametrize("args, code, needle", [
    (["plan", "no-such.yaml", "--json"], 1, "does not exist"),
    (["plan", GKE, "gcp.project=", "--json"], 1, "gcp.project"),
    (["plan", GKE, "--json", "grpo.seeed=1", "grpo.max_num_steps=0"], 1, "grpo.seeed: unknown key"),
    (["plan", GKE, "--json", "not-an-override"], 2, "KEY=VALUE"),
    (["plan", "--json"], 2, "required"),
    (["plan", GKE, "--json", "--frobnicate"], 2, "unrecognized arguments: --frobnicate"),
    (["compare", "0/0", "1/2", "--json"], 1, "not a number of problems"),
    (["compare", "1/2", "1/2", "--alpha", "1.5", "--json"], 1, "--alpha 1.5 is not a significance level"),
    (["compare", "1/2", "1/2", "--alpha", "soon", "--json"], 2, "invalid float value"),
    (["eval-parse", "no-such.log", "--json"], 1, "no such file or directory"),
    (["merge", "no-such-step", "out", "--json"], 1, "STEP_DIR no-such-step: no such file or directory"),
    (["jobs", "frobnicate", LOCAL, "--json"], 2, "invalid choice"),
])
def test_json_failures_are_one_document_on_stdout(run, args, code, needle):
    got, out, err = run(*args)
    d = one_json(out)
    assert got == code == d["exit"] and d["error"] and d["fix"] and needle in d["error"] + " ".join(d.get("problems", []))
    assert needle in err and ("fix:" in err or "usage:" in err)  # the human text still goes to stderr
    if code == 2:
        assert d["type"] == "UsageError" and "--help" in d["fix"] and "usage: nbtools" in err


def test_json_failure_of_a_command_with_data_keeps_its_data(run, tmp_path):
    (tmp_path / "runs" / "local-rehearsal" / "checkpoints" / "step_1").mkdir(parents=True)
    code, out, err = run("launch", LOCAL, "--lint-only", "--json")
    d = one_json(out)
    assert code == 1 and d["ok"] is False and d["findings"][0]["rule"] == "existing-checkpoints"
    assert d["error"] == "launch refused by lint" and "blocking finding" in d["fix"]


# -- fixes name the CLI's flags ----------------------------------------------------------------------------------


def test_fix_texts_name_cli_flags_not_library_arguments(run, tmp_path):
    step = _fake_step(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "something.txt").write_text("x")
    code, _, err = run("merge", step, tmp_path / "out")
    assert code == 1 and "pass --overwrite" in err and "OUT_DIR" in err and "overwrite=True" not in err
    (tmp_path / "runs" / "local-rehearsal" / "checkpoints" / "step_1").mkdir(parents=True)
    code, out, err = run("launch", LOCAL, "--lint-only", "--json")
    fix = one_json(out)["findings"][0]["fix"]
    assert "pass --resume" in fix and "resume=True" not in fix
    code, out, _ = run("launch", LOCAL, "--lint-only")
    assert "pass --resume" in out and "resume=True" not in out
    code, _, err = run("compare", "201/500", "30/60")
    assert code == 1 and "pass --allow-mismatch" in err and "allow_mismatch=True" not in err
    code, out, err = run("compare", "201/500", "30/60", "--allow-mismatch", "--json")
    assert code == 0 and any(n.startswith("MISMATCH (allowed)") for n in one_json(out)["notes"]) and "warning: MISMATCH" in err
    code, _, err = run("compare", "1/2", "1/2", "--alpha", "0")
    assert "e.g. --alpha 0.05" in err and "alpha=0.05" not in err
    from nbtools.cli._errors import cli_words

    assert cli_words("stop it first with nbtools.cluster.down(cfg), or") == \
        "stop it first with `nbtools down EXPERIMENT.yaml --apply`, or"
    assert cli_words("call merge(step, out, overwrite=True)") == "pass --overwrite"
    assert cli_words("pass config= (the base model's directory)") == "pass --config PATH (the base model's directory)"


def test_merge_config_that_does_not_exist_fails_at_once(run, tmp_path):
    step = _fake_step(tmp_path)
    t = time.perf_counter()
    code, out, err = run("merge", step, tmp_path / "merged", "--config", "nonexist_dir", "--json")
    assert code == 1 and time.perf_counter() - t < 2
    d = one_json(out)
    assert d["error"] == "--config nonexist_dir: no such file or directory" and "does not download" in d["fix"]
    (tmp_path / "empty").mkdir()
    code, _, err = run("merge", step, tmp_path / "merged", "--config", tmp_path / "empty")
    assert code == 1 and "has no config.json" in err and not (tmp_path / "merged").exists()


# -- no traceback, whatever the input ------------------------------------------------------------------------------


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    (tmp / "dir").mkdir()
    files = {
        "bad_yaml": "name: [unclosed\n", "dup": "name: a\nname: b\n", "unknown": "name: x\nfrobnicate: 1\n",
        "list": "- a\n- b\n", "empty": "", "types": "name: x\ngrpo: {seed: abc}\nray: {port: [1]}\n",
        "bomb": "name: x\ntrainer:\n  vllm_cfg:\n    a: &a [1,1,1,1,1,1,1,1,1,1]\n    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                "    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                "    e: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
    }
    out = {}
    for name, text in files.items():
        out[name] = tmp / f"{name}.yaml"
        out[name].write_text(text)
    out["binary"] = tmp / "binary.yaml"
    out["binary"].write_bytes(b"\x00\xff\xfe\x89PNG")
    out["garbage.parquet"] = tmp / "garbage.parquet"
    out["garbage.parquet"].write_bytes(b"PAR1 not really")
    out["garbage.csv"] = tmp / "garbage.csv"
    out["garbage.csv"].write_text("a,b\n1,2\n")
    out["evaluation_data.json"] = tmp / "ed" / "evaluation_data.json"
    out["evaluation_data.json"].parent.mkdir()
    out["evaluation_data.json"].write_text("{not json")
    out["dir"] = tmp / "dir"
    return out


def test_no_command_prints_a_traceback_for_bad_input(run, tmp_path):
    f = _bad_inputs(tmp_path)
    cases = [
        *[[cmd, f[k]] for cmd in ("plan", "manifests", "up", "down") for k in
          ("bad_yaml", "dup", "unknown", "list", "empty", "types", "bomb", "binary", "dir")],
        ["launch", f["dup"], "--lint-only"], ["jobs", "list", f["unknown"]],
        ["plan", GKE, "grpo.seed=[1"], ["plan", GKE, "grpo.seed=!!int "], ["plan", GKE, "trainer.vllm_cfg=&a [*a]"],
        ["trajectories", f["dir"]], ["trajectories", f["binary"]], ["metrics", tmp_path / "none"],
        ["checkpoints", f["binary"]], ["checkpoints", tmp_path / "none"],
        ["merge", f["dir"], tmp_path / "o"], ["merge", f["binary"], tmp_path / "o"],
        ["merge", _fake_step(tmp_path), f["binary"]], ["merge", _fake_step(tmp_path / "b"), tmp_path / "o2", "--config", f["binary"]],
        ["eval-parse", f["dir"]], ["eval-parse", f["binary"]],
        ["compare", f["garbage.parquet"], "1/2"], ["compare", f["garbage.csv"], "1/2"],
        ["compare", f["evaluation_data.json"], "1/2"], ["compare", f["dir"], "1/2"], ["compare", f["binary"], "1/2"],
        ["compare", "5/3", "1/2"], ["compare", "1/0", "1/2"],
        ["demo", "--notebooks-dir", tmp_path / "none"], ["demo", "--notebooks-dir", f["binary"]],
        ["demo", "--out", f["binary"], "--notebooks-dir", f["dir"]],
    ]
    for args in cases:
        code, out, err = run(*args, "--json")
        d = one_json(out)
        assert code in (1, 2) and d["error"] and d["fix"], (args, err)
        assert "unexpected" not in d["error"], (args, d)  # every one of these is a known failure with its own fix


def test_permission_denied_and_unexpected_errors_are_messages(run, tmp_path, monkeypatch):
    log = tmp_path / "eval.log"
    log.write_text("x")

    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)  # root ignores chmod, so simulate it
    code, out, err = run("eval-parse", log, "--json")
    d = one_json(out)
    assert code == 1 and d["error"] == f"{log}: permission denied" and "chmod" in d["fix"]
    monkeypatch.undo()
    monkeypatch.setattr("nbtools.cli._commands.cmd_checkpoints", lambda a: None.missing)  # a bug, not bad input
    code, out, err = run("checkpoints", tmp_path, "--json")
    d = one_json(out)
    assert code == 1 and d["error"].startswith("unexpected AttributeError") and "NBTOOLS_DEBUG=1" in d["fix"]


def test_console_script_end_to_end_has_no_traceback(tmp_path):
    f = _bad_inputs(tmp_path)
    env = {**os.environ, "NBTOOLS_RUNS_DIR": str(tmp_path / "runs")}
    env.pop("NBTOOLS_DEBUG", None)
    for args, code in ((["plan", f["dup"], "--json"], 1), (["plan", GKE, "--json", "--script", "x"], 2),
                       (["compare", "0/0", "1/2", "--json"], 1)):
        r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == code and "Traceback" not in r.stderr, r.stderr
        assert json.loads(r.stdout)["fix"]


# -- tokens pasted into the config never reach any output --------------------------------------------------------


@pytest.mark.parametrize("token", [HF, WANDB])
def test_pasted_token_reaches_no_output(run, tmp_path, token):
    exp = tmp_path / "exp.yaml"
    data = yaml.safe_load(GKE.read_text())
    data["secrets"]["hf_token"] = {"env": token, "k8s_secret": "hf-token", "key": "token"}
    exp.write_text(yaml.safe_dump(data))
    out_dir = tmp_path / "k8s"
    outputs = []
    for args in (["manifests", exp, "--out", out_dir], ["manifests", exp, "--out", out_dir, "--json"],
                 ["plan", exp, "--script"], ["plan", exp, "--json"],
                 ["manifests", GKE, "--out", out_dir, f"secrets.hf_token.env={token}"],
                 ["plan", GKE, "--script", f"secrets.wandb_api_key.env={token}"],
                 ["plan", GKE, "--script", f"secrets.hf_token={token}"],
                 ["plan", GKE, f"trainer.env_vars.X={token}"], ["plan", GKE, "--json", token]):
        code, out, err = run(*args)
        assert code in (1, 2), args
        outputs.append(out + err)
    written = [p.read_text() for p in out_dir.rglob("*") if p.is_file()] if out_dir.exists() else []
    for text in outputs + written:
        assert token not in text and token[:10] not in text
    assert any("put the NAME of the env var here" in o for o in outputs)


def test_secret_values_in_the_environment_are_never_written(run, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("WANDB_API_KEY", WANDB)
    code, script, _ = run("plan", GKE, "--script")
    assert code == 0 and "HF_TOKEN" in script
    code, _, _ = run("manifests", GKE, "--out", tmp_path / "k8s")
    assert code == 0
    texts = [script] + [p.read_text() for p in (tmp_path / "k8s").rglob("*.yaml")]
    assert all(HF not in t and WANDB not in t for t in texts) and "secretKeyRef" in texts[1]


PASTED = "Zq7pW2xLm9Kc4Rt8Vb3Ny6Hd"  # not token-shaped: only its value, known from the environment, gives it away


@pytest.mark.parametrize("args", [
    ["plan", GKE, "gcp.project={v}"],
    ["plan", GKE, "--json", "gcp.project={v}"],
    ["manifests", GKE, "storage.bucket={v}"],
    ["launch", LOCAL, "--lint-only", "--json", "name={v}"],
    ["launch", LOCAL, "--lint-only", "name=bad_{v}_NAME"],
    ["plan", GKE, "secrets.my_key.env=MY_SERVICE_KEY", "data.dataset=x{w}"],
])
def test_a_secret_pasted_into_a_value_is_refused_and_never_echoed(run, monkeypatch, tmp_path, args):
    """#31: the value of a secret the experiment names (or HF_TOKEN & co.) is never printed, written or echoed."""
    monkeypatch.setenv("HF_TOKEN", PASTED)
    monkeypatch.setenv("MY_SERVICE_KEY", PASTED[::-1])
    monkeypatch.chdir(tmp_path)
    code, out, err = run(*[str(a).format(v=PASTED, w=PASTED[::-1]) for a in args])
    assert code == 1, out + err
    assert PASTED not in out + err and PASTED[::-1] not in out + err
    var = "$MY_SERVICE_KEY" if any("{w}" in str(a) for a in args) else "$HF_TOKEN"
    assert f"holds the value of {var}" in out + err and "reference the secret by name under `secrets:`" in out + err
    assert not any(PASTED.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())  # nothing written
