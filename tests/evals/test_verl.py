"""Evaluation of verl runs (issue 28 item 3): the vLLM generation job the verl trainer's eval plan builds, and its
program run end to end on CPU against a vLLM TEST DOUBLE (tests/doubles/vllm_double), its output read by the same
``evals.collect`` and paired statistics as NeMo-RL's run_eval.py output.

Scoring is verl's GSM8K rule (verl v0.7.0 verl/utils/reward_score/gsm8k.py, method "strict": the last
``#### <number>`` of the final 300 characters, commas and ``$`` dropped, equal to the ground truth).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nbtools import config, evals, trainers
from nbtools.evals.vllm_generate import gsm8k_score

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))


def _cfg(**over) -> config.Experiment:
    cfg = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke")
    return cfg.replace(**over) if over else cfg


@pytest.mark.parametrize("response,truth,want", [
    ("so 3 + 4 = 7 #### 7", "7", 1.0),
    ("#### 1,234", "1234", 1.0),            # commas dropped
    ("#### 5 then #### 6", "5", 0.0),        # the last one counts
    ("The answer is 7", "7", 0.0),           # strict: no "####", no score (format_score 0)
    ("#### 7" + "x" * 300, "7", 0.0),        # only the last 300 characters are read
    ("#### -3", "-3", 1.0),
])
def test_gsm8k_rule_is_verls(response, truth, want):
    assert gsm8k_score(response, truth) == want


def test_the_eval_plan_builds_one_job_per_model_on_the_test_split():
    cfg = _cfg()
    assert evals.flow.evaluator(trainers.get(cfg)) is evals.flow.GENERATE_JOB
    base, tuned = evals.generate_jobs(cfg)
    assert base.entrypoint.startswith("python3 -u -m nbtools.evals.vllm_generate --data /data/gsm8k/test.parquet "
                                      "--model Qwen/Qwen2.5-32B-Instruct --save-path ")
    assert "--tensor-parallel-size 8" in base.entrypoint and base.runtime_env["py_modules"]  # nbtools travels along
    assert base.save_path != tuned.save_path and base.submission_id != tuned.submission_id
    assert tuned.model_name == "/data/verl-runs/verl-qwen2-5-32b-gsm8k-b200/merged_hf"  # notebook 06 merges there
    assert tuned.local_copy and not base.local_copy  # the merged model goes to local disk first (no mmap via gcsfuse)
    # vLLM runs in the driver: Ray must start it on a GPU node (the KubeRay head has none), and only there is the copy
    assert (base.entrypoint_num_gpus, tuned.entrypoint_num_gpus, tuned.copy_to) == (8, 8, "worker")
    with pytest.raises(Exception, match="greedy decoding gives one answer"):
        evals.build_generate_job(cfg, cfg.model.name, label="x", num_tests_per_prompt=4, temperature=0.0)


def test_the_verl_evaluation_generates_as_long_as_the_run_trained():
    """Issue 42 item 3: the run's data.max_response_length (512 here), not the whole sequence length (1024)."""
    cfg = _cfg()
    assert "data.max_response_length=512" in cfg.trainer.overrides and cfg.model.max_total_sequence_length != 512
    base, tuned = evals.generate_jobs(cfg)
    assert "--max-tokens 512 " in base.entrypoint and "--max-tokens 512 " in tuned.entrypoint
    assert (base.length, base.length_from) == (512, "the run's response length (data.max_response_length)")
    longer = _cfg(**{"trainer.overrides": [o.replace("=512", "=768") if o.startswith("data.max_response_length") else o
                                           for o in cfg.trainer.overrides]})
    assert "--max-tokens 768 " in evals.generate_jobs(longer)[0].entrypoint
    unset = _cfg(**{"trainer.overrides": [o for o in cfg.trainer.overrides if not o.startswith("data.max_response_length")]})
    assert "--max-tokens 512 " in evals.generate_jobs(unset)[0].entrypoint  # verl's own default
    assert "--max-tokens 100 " in evals.generate_jobs(cfg, max_new_tokens=100)[0].entrypoint


def _verl_test_split(path: Path) -> Path:
    q = "Natalia sold clips to 48 of her friends. How many? Let's think step by step and output the final answer after \"####\"."
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{q} ({i})"}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"split": "test", "index": i}}
            for i in range(4)]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _model(tmp_path: Path, seed: int) -> Path:
    from nbtools.rehearsal import model as m

    local = config.load(ROOT / "experiments" / "local.yaml", backend="local")
    tok = m.build_tokenizer()
    return m.save_hf(m.build_model(local, tok, seed=seed), tok, tmp_path / f"model-{seed}")


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "doubles" / "vllm_double"), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "nbtools.evals.vllm_generate", *args], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.slow
def test_the_job_writes_run_evals_format_and_07_compares_it(tmp_path):
    data = _verl_test_split(tmp_path / "test.parquet")
    results = {}
    for which, seed in (("baseline", 0), ("fine-tuned", 1)):
        save = tmp_path / "eval" / which
        r = _run(["--data", str(data), "--model", str(_model(tmp_path, seed)), "--save-path", str(save), "--n", "2",
                  "--temperature", "1.0", "--max-tokens", "8", "--seed", "3"])
        assert r.returncode == 0, r.stderr[-2000:]
        res = evals.collect(r.stdout, save_path=save)  # the same reader as NeMo-RL's run_eval.py output
        t = res.table
        assert len(t) == 8 and sorted(map(int, t.problem_id.unique())) == [0, 1, 2, 3] and list(map(int, t["sample"][:2])) == [0, 1]
        truths = [str(i) for i in range(4) for _ in range(2)]
        assert [gsm8k_score(x, y) for x, y in zip(t.response, truths, strict=True)] == [1.0 if c else 0.0 for c in t.correct]
        assert res.score_block.num_tests_per_prompt == 2 and res.score_block.denominator == 4
        assert res.score_block.score == pytest.approx(t.groupby("problem_id").correct.mean().mean(), abs=1e-4)
        results[which] = res
    cmp = evals.compare(results["baseline"], results["fine-tuned"])  # notebook 07's paired comparison
    assert cmp is not None


def test_an_unknown_data_source_is_refused(tmp_path):
    df = pd.read_parquet(_verl_test_split(tmp_path / "t.parquet"))
    df["data_source"] = "lighteval/MATH"
    df.to_parquet(tmp_path / "t.parquet")
    r = _run(["--data", str(tmp_path / "t.parquet"), "--model", "unused", "--save-path", str(tmp_path / "o")])
    assert r.returncode != 0 and "no scorer for data_source ['lighteval/MATH']" in r.stderr


def test_one_engine_runs_every_decoding_each_into_its_own_save_path(tmp_path, monkeypatch, capsys):
    """``--n 1 4 --temperature 0 1 --save-path A B``: vLLM's engine starts once (minutes on a real model) and each
    decoding writes its own run_eval.py-format results and prints its own score block, which ``collect`` picks by
    samples and temperature. A recording ``vllm`` module stands in for the engine: what is checked is the program's
    use of it."""
    import types

    from nbtools.evals import vllm_generate

    engines, calls = [], []

    class LLM:
        def __init__(self, model, **kw):
            engines.append(model)

        def chat(self, messages, params):
            calls.append((params.n, params.temperature))
            out = lambda k: types.SimpleNamespace(text=f"#### {k % 2}")  # noqa: E731
            return [types.SimpleNamespace(outputs=[out(k) for k in range(params.n)]) for _ in messages]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=types.SimpleNamespace))
    data, a, b = _verl_test_split(tmp_path / "test.parquet"), tmp_path / "greedy", tmp_path / "sampled"
    assert vllm_generate.main(["--data", str(data), "--model", "m", "--save-path", str(a), str(b), "--n", "1", "4",
                               "--temperature", "0", "1.0", "--max-tokens", "8"]) == 0
    log = capsys.readouterr().out
    assert engines == ["m"] and calls == [(1, 0.0), (4, 1.0)]
    greedy = evals.collect(log, save_path=a, n=1, temperature=0.0)
    sampled = evals.collect(log, save_path=b, n=4, temperature=1.0)
    assert len(greedy.table) == 4 and len(sampled.table) == 16 and sampled.score_block.num_tests_per_prompt == 4
    assert greedy.params["num_tests_per_prompt"] == 1 and sampled.params["temperature"] == 1.0  # each its config.json
    assert greedy.score_block.accuracy == 0.25 and sampled.score_block.accuracy == pytest.approx(0.25)
    with pytest.raises(SystemExit):  # the decodings' lists must pair up
        vllm_generate.main(["--data", str(data), "--model", "m", "--save-path", str(a), "--n", "1", "4"])
