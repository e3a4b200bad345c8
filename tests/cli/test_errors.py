"""The `nbtools` CLI on bad input: one JSON document with --json, fixes in CLI words, no traceback, no token leaks.

Most calls run ``nbtools.cli.main`` in this process (it points fd 1 at stderr itself, so ``capfd`` sees exactly what
a terminal would); a few run the installed console script to prove the same end to end. Nothing here needs a Ray
head or the rehearsal run that tests/integration/test_cli.py starts.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ports import free_port

from nbtools import cli

ROOT = Path(__file__).resolve().parents[2]
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


def test_an_error_carries_both_fixes_as_data():
    """A notebook sees the Python form (str, .fix); the CLI prints the CLI form; no text is rewritten."""
    from nbtools.cli._errors import describe
    from nbtools.errors import ConfigError, ConflictError, Fix

    e = ConflictError("out exists", fix=Fix("pass overwrite=True", cli="pass --overwrite"))
    assert str(e) == "out exists\n  fix: pass overwrite=True" and e.fix == "pass overwrite=True"
    assert e.cli_fix == "pass --overwrite" and describe(e, fallback_fix="-").fix == "pass --overwrite"
    assert describe(e, fallback_fix="-").error == "out exists"  # the message without the fix
    plain = ConflictError("busy", fix="wait a minute")  # no call or argument in it: one form serves both
    assert plain.fix == plain.cli_fix == describe(plain, fallback_fix="-").fix == "wait a minute"
    c = ConfigError(["a: bad; fix: set `a: 1`"], fix=Fix("pass alpha=0.05", cli="pass --alpha 0.05"))
    assert str(c).endswith("fix: pass alpha=0.05") and describe(c, fallback_fix="-").fix == "pass --alpha 0.05"
    assert describe(ConfigError(["a: bad; fix: set `a: 1`"]), fallback_fix="-").fix == "set `a: 1`"


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


# -- every error class reaches a terminal user with the CLI's fix -----------------------------------------------

# Words only a Python caller can act on: a call (`name(`, but not the plural "file(s)"), a keyword argument
# (`overwrite=True`, `config= with`, `exp=3`), or an attribute of the notebook's `cfg`.
PYTHON_ONLY = re.compile(r"[A-Za-z_]\w*\((?!s\))|(?<![\w.$/-])[a-z_][a-z0-9_]*=(?=True|False|None|\.\.\.|['\"\d\s]|$)"
                         r"|\bcfg\.\w")


def _error_classes() -> set[str]:
    """Every NbtoolsError subclass defined in the package (found with ast, so nothing heavy is imported)."""
    known, bases = {"NbtoolsError"}, {}
    for p in (ROOT / "nbtools").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    while True:
        more = {c for c, b in bases.items() if b & known} - known
        if not more:
            return known - {"NbtoolsError"}
        known |= more


def _via_describe(raise_it) -> dict:
    """The JSON document `--json` prints for an error raised by its real code path in this process."""
    from nbtools.cli._errors import describe

    try:
        raise_it()
    except Exception as e:  # noqa: BLE001 - any error: the CLI's layer handles every one
        return describe(e, fallback_fix="-").doc("test")
    raise AssertionError("nothing was raised")


def _stale_version(tmp_path):
    from nbtools import storage

    url = f"memory://{tmp_path.name}/f.txt"
    storage.write_text(url, "one")
    storage.read_bytes(url, version="a generation that is gone")


def _job_failed(tmp_path):
    from ray.job_submission import JobInfo, JobStatus

    from nbtools.jobs import Job

    info = JobInfo(status=JobStatus.FAILED, entrypoint="python run_grpo.py", message="exit code 3")
    Job(f"http://127.0.0.1:{free_port()}", "exp-1a2b3c")._raise_if_failed(info)  # the tail: "(log unavailable)"


def _step_failed(tmp_path):
    from nbtools.gke import Plan, Step

    Plan("provision", [Step("quota", "quota", ("sh", "-c", "echo quota exceeded >&2; exit 3"))],
         tmp_path / "state.json").apply(dry_run=False, progress=False)


def _plan_incomplete(tmp_path):
    from nbtools.gke import Plan, Step

    Plan("destroy", [Step("gpu-pool", "gpu-pool", ("sh", "-c", "exit 3"))], tmp_path / "state.json",
         keep_going=True).apply(dry_run=False, progress=False)


def _access_denied(tmp_path):
    """A directory this account may not list (root ignores chmod here, so the OS's refusal is what is simulated)."""
    from unittest import mock

    from nbtools import storage

    with mock.patch("os.scandir", side_effect=PermissionError(13, "Permission denied", str(tmp_path))):
        storage.ls(tmp_path)


# class -> how a user meets it: CLI arguments (run through nbtools.cli.main with --json), or a real raise path
# whose error goes through the CLI's error layer (no CLI command reaches it without a cluster).
ERROR_PATHS = {
    "ConfigError": ("cli", lambda tmp: ["compare", "201/500", "30/60"]),  # mismatched problems: the fix names a flag
    "NotFoundError": ("cli", lambda tmp: ["health", tmp / "empty"]),
    "NotReadyError": ("cli", lambda tmp: ["jobs", "list", LOCAL, f"ray.dashboard_port={free_port()}"]),
    "DependencyError": ("cli", lambda tmp: ["health", "s3://some-bucket/run"]),  # s3fs is not installed
    "CheckpointError": ("cli", lambda tmp: ["merge", _fake_step(tmp), tmp / "merged"]),  # no config.json or .yaml
    "ConflictError": ("cli", lambda tmp: ["merge", _fake_step(tmp / "b"), tmp / "out"]),  # OUT_DIR holds other files
    "LintError": ("cli", lambda tmp: ["launch", LOCAL]),  # a checkpoint of an earlier run is there
    "JobFailedError": ("raise", _job_failed),
    "StaleVersion": ("raise", _stale_version),
    "StepFailedError": ("raise", _step_failed),
    "PlanIncompleteError": ("raise", _plan_incomplete),
    "AccessDeniedError": ("raise", _access_denied),
}


def test_every_error_class_has_a_path_here():
    assert _error_classes() == set(ERROR_PATHS)


@pytest.mark.parametrize("kind", sorted(ERROR_PATHS))
def test_every_error_class_reaches_the_cli_with_a_fix_in_cli_words(run, tmp_path, monkeypatch, kind):
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("not a merge")
    (tmp_path / "runs" / "local-rehearsal" / "checkpoints" / "step_1").mkdir(parents=True)
    from nbtools import jobs
    from nbtools.jobs._client import not_found

    def no_such_job(address, sid):  # the cluster answers "no job with that id" (so submit lints a new one)
        raise not_found(address, sid, [])

    monkeypatch.setattr(jobs, "attach", no_such_job)
    way, how = ERROR_PATHS[kind]
    if way == "cli":
        code, out, err = run(*how(tmp_path), "--json")
        doc = one_json(out)
        assert code == 1 and "fix:" in err and doc["fix"] in err
    else:
        doc = _via_describe(lambda: how(tmp_path))
    assert doc["type"] == kind, doc
    assert doc["fix"] and not PYTHON_ONLY.search(doc["fix"]), doc["fix"]
    assert not any(PYTHON_ONLY.search(p.partition("; fix: ")[2]) for p in doc.get("problems", [])), doc


def test_a_fix_with_python_words_also_has_a_cli_form():
    """Statically: every ``fix=`` (and every ``; fix:`` of a ConfigError) whose text names a call or an argument is
    a ``Fix(python, cli=...)``, so the CLI never prints notebook advice."""

    def text(node, consts):
        if isinstance(node, ast.Name) and node.id in consts:
            return text(consts[node.id], consts)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        if isinstance(node, ast.BinOp):
            return (text(node.left, consts) or "") + (text(node.right, consts) or "")
        if isinstance(node, ast.IfExp):
            return (text(node.body, consts) or "") + " | " + (text(node.orelse, consts) or "")
        return None

    bad = []
    for p in sorted((ROOT / "nbtools").rglob("*.py")):
        tree = ast.parse(p.read_text())
        consts = {n.targets[0].id: n.value for n in tree.body
                  if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            fixes = [k.value for k in node.keywords if k.arg == "fix"]
            if name in ("Finding",) and len(node.args) >= 5:
                fixes.append(node.args[4])
            for f in fixes:
                if isinstance(f, ast.Call) and getattr(f.func, "id", "") == "Fix":
                    continue
                t = text(f, consts)
                if t and PYTHON_ONLY.search(t):
                    bad.append(f"{p.relative_to(ROOT)}:{f.lineno}: {t[:90]}")
            if name == "ConfigError":  # problems that carry their own fix
                for a in node.args:
                    t = text(a, consts) or ""
                    if "fix:" in t and PYTHON_ONLY.search(t.split("fix:", 1)[1]):
                        bad.append(f"{p.relative_to(ROOT)}:{a.lineno}: {t[:90]}")
    assert not bad, "a fix names a Python call or argument but has no CLI form (use nbtools.errors.Fix):\n" + "\n".join(bad)


def test_the_cli_rewrites_no_message():
    """The old regex table is gone: the CLI prints what each error carries."""
    src = (ROOT / "nbtools" / "cli" / "_errors.py").read_text()
    assert "cli_words" not in src and "_WORDS" not in src and "re.sub" not in src and "import re" not in src


def test_an_override_that_is_not_yaml_names_its_key_and_the_fix_without_its_value(run):
    code, out, _ = run("plan", GKE, "grpo.seed=[1 secret-ish", "--json")
    d = one_json(out)
    assert code == 1 and d["type"] == "ConfigError" and "secret-ish" not in out
    assert d["problems"][0].startswith("grpo.seed=…: not valid YAML: line 1, column ") and "the file" not in out
    assert d["fix"] == "write a plain value, or quote it as a string: grpo.seed='…'"


def test_launch_lint_only_asks_the_trainers_registry_once(run, monkeypatch):
    """``nbtools launch --lint-only`` builds the job and lints it with one trainer (it asked the registry twice)."""
    import nbtools

    asked, real = [], nbtools.trainers.get
    monkeypatch.setattr(nbtools.trainers, "get", lambda *a, **k: asked.append(a) or real(*a, **k))
    code, out, _ = run("launch", LOCAL, "--lint-only", "--json")
    assert code == 0 and one_json(out)["ok"] and len(asked) == 1
