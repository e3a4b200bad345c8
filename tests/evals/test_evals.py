"""nbtools.evals: statistics vs hand-computed values and scipy, NeMo-RL output parsers, comparisons, job builder.

NeMo-RL's run_eval.py cannot run here (vLLM + GPUs); its printed block and `eval.save_path` files are
reproduced byte-for-byte from `nemo_rl/evals/eval.py` (`_print_results`, `_save_evaluation_data_to_json`) by the
test double `_nemo_rl_block` / `_write_save_path` below.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from run_eval_double import FAKE_RUN_EVAL, PREFIX
from scipy import stats as st

import nbtools
from nbtools.errors import ConfigError, NotFoundError
from nbtools.evals import EvalResult, compare, load_evaluation_data, parse_score_blocks, stats

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------ statistics
def test_wilson_matches_hand_computation_and_scipy():
    # hand: p=0.8, n=10, z=1.959964: centre=(0.8+0.19207)/1.38415=0.71674, half=0.22658
    low, high = stats.wilson_ci(8, 10)
    assert low == pytest.approx(0.4901625, abs=1e-6) and high == pytest.approx(0.9433178, abs=1e-6)
    for k, n in [(0, 30), (3, 30), (201, 500), (500, 500)]:
        ref = st.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert stats.wilson_ci(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert stats.wilson_ci(0, 7)[0] == 0.0 and stats.wilson_ci(7, 7)[1] == 1.0
    frac = stats.wilson_ci(3.5, 30)  # NeMo-RL pass@k sums are fractional
    assert stats.wilson_ci(3, 30)[0] < frac[0] < stats.wilson_ci(4, 30)[0]
    with pytest.raises(ValueError, match="n > 0"):
        stats.wilson_ci(0, 0)


def test_mcnemar_exact_is_binomial_on_discordant_pairs():
    # hand: fixed=10, broken=2 -> 2 * P(X<=2 | Bin(12, .5)) = 2 * (1 + 12 + 66) / 4096
    assert stats.mcnemar_exact(fixed=10, broken=2).p_value == pytest.approx(2 * 79 / 4096)
    assert stats.mcnemar_exact(fixed=2, broken=10).p_value == pytest.approx(2 * 79 / 4096)
    assert stats.mcnemar_exact(fixed=7, broken=7).p_value == pytest.approx(1.0)
    assert stats.mcnemar_exact(fixed=0, broken=0).p_value == 1.0
    assert stats.mcnemar_exact(fixed=40, broken=9).p_value == pytest.approx(st.binomtest(40, 49).pvalue)


def test_two_proportion_z_matches_hand_and_chi2():
    # the tutorial's numbers: 201/500 vs 232/500
    p = (201 + 232) / 1000
    z = (232 / 500 - 201 / 500) / math.sqrt(p * (1 - p) * (2 / 500))
    res = stats.two_proportion_ztest(201, 500, 232, 500)
    assert res.statistic == pytest.approx(z)
    chi2 = st.chi2_contingency([[201, 299], [232, 268]], correction=False)
    assert res.p_value == pytest.approx(chi2.pvalue, rel=1e-9)
    fisher = stats.fisher_exact(201, 500, 232, 500)
    assert fisher.p_value == pytest.approx(st.fisher_exact([[201, 299], [232, 268]]).pvalue)


def test_pass_at_k_unbiased_estimator():
    # hand: n=5, c=2, k=2 -> 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert stats.pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert stats.pass_at_k(5, 0, 3) == 0.0 and stats.pass_at_k(5, 3, 3) == 1.0
    assert stats.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    n, c = np.array([10, 10, 16]), np.array([1, 4, 9])
    exact = [1 - math.comb(ni - ci, 4) / math.comb(ni, 4) for ni, ci in zip(n, c, strict=True)]
    assert stats.pass_at_k(n, c, 4) == pytest.approx(exact)
    with pytest.raises(ValueError, match="at least k samples"):
        stats.pass_at_k(2, 1, 4)


def test_paired_bootstrap_is_seeded_and_covers_delta():
    rng = np.random.default_rng(1)
    a = (rng.random(300) < 0.4).astype(float)
    b = np.where(rng.random(300) < 0.2, 1.0, a)
    one = stats.paired_bootstrap(a, b, seed=3)
    assert one == stats.paired_bootstrap(a, b, seed=3)
    delta, low, high = one
    assert delta == pytest.approx(b.mean() - a.mean()) and low < delta < high
    assert stats.paired_bootstrap(a, a) == (0.0, 0.0, 0.0)


# ------------------------------------------------------------------------------------------------ parsers
def _nemo_rl_block(model_name, dataset_name, score, dataset_size, *, n=1, temperature=0.0, top_k=-1, k=1):
    """Exactly what nemo_rl/evals/eval.py `_print_results` prints (f-string `=` reprs)."""
    max_new_tokens, top_p, seed, metric, num_tests_per_prompt = 8192, 1.0, 42, "pass@k", n
    average_score = score / dataset_size
    return (
        "\n" + "=" * 60 + "\n"
        f"{model_name=} {dataset_name=}\n"
        f"{max_new_tokens=} {temperature=} {top_p=} {top_k=} {seed=}\n\n"
        f"metric={metric[:-1]}{k} {num_tests_per_prompt=}\n\n"
        f"score={average_score:.4f} ({score}/{dataset_size})\n" + "=" * 60 + "\n\n"
    )


NOISE = """2026-11-21 10:00:01,123 INFO worker.py:1820 -- Connected to Ray cluster.
\x1b[36m(VllmGenerationWorker pid=812)\x1b[0m INFO 11-21 10:00:05 model_runner.py:1041] Loading model weights
{'generation': {'model_name': 'google/gemma-3-1b-it', 'temperature': 0.0}, 'data': {'dataset_name': 'math500'}}
Running: python examples/run_eval.py generation.model_name=/tmp/x data.dataset_name=math500 score=oops
Processed prompts: 100%|██████████| 500/500 [01:02<00:00,  8.01it/s, est. speed input: 900 toks/s]
============================================================
"""


def test_parse_blocks_from_noisy_log_with_several_blocks():
    log = (NOISE + _nemo_rl_block("gemma-3-1b-it", "math500", 201.0, 500) + NOISE
           + _nemo_rl_block("merged_hf", "math500", 232.0, 500) + "✓ Evaluation data saved to: /data/x\n")
    blocks = parse_score_blocks(log)
    assert [(b.model_name, b.score, b.numerator, b.denominator) for b in blocks] == [
        ("gemma-3-1b-it", 0.402, 201.0, 500), ("merged_hf", 0.464, 232.0, 500)]
    b = blocks[0]
    assert (b.dataset_name, b.max_new_tokens, b.temperature, b.top_p, b.top_k, b.seed, b.metric,
            b.num_tests_per_prompt) == ("math500", 8192, 0.0, 1.0, -1, 42, "pass@1", 1)
    assert b.accuracy == pytest.approx(0.402)


def test_parse_fractional_numerator_and_ray_prefixes():
    block = _nemo_rl_block("Qwen2.5-Math-1.5B-Instruct", "AIME2024", 3.5625, 30, n=16, temperature=0.6, top_k=20)
    prefixed = "\n".join(f"\x1b[32m(run_eval pid=77)\x1b[0m {ln}" if ln else ln for ln in block.splitlines())
    for text in (block, prefixed):
        (b,) = parse_score_blocks(NOISE + text)
        assert (b.numerator, b.denominator, b.num_tests_per_prompt, b.top_k) == (3.5625, 30, 16, 20)
        assert b.score == float(f"{3.5625 / 30:.4f}") and b.temperature == 0.6


def test_parse_missing_field_names_it():
    broken = _nemo_rl_block("m", "math500", 1.0, 2).replace(" top_k=-1", "")
    with pytest.raises(NotFoundError, match=r"no 'top_k=' field[\s\S]*fix: pass the complete job log"):
        parse_score_blocks(NOISE + broken)
    truncated = _nemo_rl_block("m", "math500", 1.0, 2).split("score=")[0]
    assert parse_score_blocks(truncated) == [] == parse_score_blocks(truncated, strict=False)  # still being written
    with pytest.raises(NotFoundError, match="'score='"):  # cut short, but the log goes on: a damaged block
        parse_score_blocks(truncated + "=" * 60 + "\nmore output\n")
    assert parse_score_blocks(NOISE) == []


def _write_save_path(save: Path, rewards: list[float], *, n: int, extra=None) -> Path:
    """What `_save_evaluation_data_to_json` writes: config.json + evaluation_data.json with str() reprs."""
    save.mkdir(parents=True, exist_ok=True)
    (save / "config.json").write_text(json.dumps({"model_name": "m", "dataset_name": "math500", "metric": "pass@k",
                                                  "k_value": 1, "num_tests_per_prompt": n, "temperature": 1.0,
                                                  "top_p": 1.0, "top_k": -1}, indent=2))
    rows = []
    for i, r in enumerate(rewards):
        info = {"ground_truth": str(i // n), **((extra or {}).get(i // n, {}))}
        msg = [{"role": "user", "content": f"problem {i // n}"}, {"role": "assistant", "content": f"answer {i}"}]
        rows.append({"prompt": f"problem {i // n}", "response": f"answer {i}", "reward": r, "message_log": str(msg),
                     "extra_env_info": str(info), "sample_index": i})
    (save / "evaluation_data.json").write_text(json.dumps({"evaluation_data": rows}, indent=2))
    return save


def test_load_evaluation_data(tmp_path):
    extra = {0: {"level": 1, "subject": "Algebra"}, 1: {"level": 5, "subject": "Geometry"}}
    save = _write_save_path(tmp_path / "math500_base", [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], n=2, extra=extra)
    df = load_evaluation_data(save)
    assert list(df["problem_id"]) == ["0", "0", "1", "1", "2", "2"] and list(df["sample"]) == [0, 1] * 3
    assert list(df["correct"]) == [True, False, False, False, True, True]
    assert {"prompt", "response", "reward", "sample_index", "ground_truth", "level", "subject"} <= set(df.columns)
    assert df.loc[2, "level"] == 5 and df.loc[0, "subject"] == "Algebra"
    with pytest.raises(NotFoundError, match="eval.save_path"):
        load_evaluation_data(tmp_path / "nowhere")


# ------------------------------------------------------------------------------------------------ compare
def _result(correct: list[bool] | np.ndarray, *, n: int = 1, ids=None) -> EvalResult:
    correct = list(map(bool, correct))
    probs = len(correct) // n
    ids = ids or [f"p{i}" for i in range(probs)]
    table = pd.DataFrame({"problem_id": [ids[i // n] for i in range(len(correct))],
                          "sample": [i % n for i in range(len(correct))], "prompt": "", "response": "",
                          "extracted_answer": None, "correct": correct})
    return EvalResult(table=table, model="m")


def test_identical_models_show_no_significant_difference():
    rng = np.random.default_rng(0)
    a = rng.random(200) < 0.5
    cmp = compare(_result(a), _result(a))
    assert cmp.paired and cmp.test == "McNemar exact" and cmp.p_value == 1.0 and cmp.delta == 0.0
    assert cmp.flips == {"fixed": 0, "broken": 0, "both": int(a.sum()), "neither": int((~a).sum())}
    assert not cmp.significant and cmp.verdict.startswith("No significant difference")
    sampled = rng.random(200 * 4) < 0.3
    cmp_s = compare(_result(sampled, n=4), _result(sampled, n=4))
    assert cmp_s.paired and "Wilcoxon" in cmp_s.test and cmp_s.p_value == 1.0
    assert [r["k"] for r in cmp_s.pass_at_k] == [1, 2, 4] and all(r["a"] == r["b"] for r in cmp_s.pass_at_k)


def test_paired_gain_flip_table_and_verdict():
    base = np.array([False] * 60 + [True] * 40)
    tuned = base.copy()
    tuned[:25] = True  # 25 fixed
    tuned[60:63] = False  # 3 broken
    cmp = compare(_result(base), _result(tuned), names=("base", "tuned"), alpha=0.01)
    assert cmp.flips == {"fixed": 25, "broken": 3, "both": 37, "neither": 35}
    assert cmp.p_value == pytest.approx(st.binomtest(25, 28).pvalue)
    assert cmp.delta == pytest.approx(0.22) and cmp.ci_low < 0.22 < cmp.ci_high and cmp.ci_low > 0
    assert cmp.significant and cmp.verdict.startswith("tuned is better than base")
    assert "25 fixed, 3 broken" in cmp.verdict
    ft = cmp.flip_table()
    assert ft.loc["base wrong", "tuned correct"] == 25 and ft.loc["base correct", "tuned wrong"] == 3
    d = cmp.to_dict()
    assert json.loads(json.dumps(d))["p_value"] == pytest.approx(cmp.p_value)
    assert {"test", "p_value", "delta", "ci_low", "ci_high", "paired", "verdict"} <= set(d)
    assert "fixed" in cmp._repr_html_()


def test_totals_only_use_the_unpaired_test_labelled_weaker(tmp_path):
    a_block = parse_score_blocks(_nemo_rl_block("base", "math500", 201.0, 500))[0]
    b_block = parse_score_blocks(_nemo_rl_block("tuned", "math500", 232.0, 500))[0]
    cmp = compare(a_block, b_block)
    assert not cmp.paired and "unpaired" in cmp.test
    assert cmp.p_value == pytest.approx(stats.two_proportion_ztest(201, 500, 232, 500).p_value)
    assert "weaker than a paired test" in cmp.verdict and cmp.flips is None
    with pytest.raises(ConfigError, match="paired comparison"):
        cmp.flip_table()
    assert compare((201, 500), (232, 500)).p_value == pytest.approx(cmp.p_value)
    # results with no common problems cannot be paired either
    with pytest.warns(UserWarning, match="MISMATCH"):
        cmp2 = compare(_result([True, False]), _result([True, True], ids=["x", "y"]), allow_mismatch=True)
    assert not cmp2.paired and any("share no problem ids" in n for n in cmp2.notes)


def test_eval_result_save_load_roundtrip(tmp_path):
    r = _result([True, False, True, True], n=2)
    out = r.save(tmp_path / "eval" / "x")
    assert sorted(p.name for p in out.iterdir()) == ["results.csv", "results.parquet", "summary.json"]
    back = EvalResult.load(out)
    assert back.accuracy == r.accuracy == 0.75 and back.n == 2 and back.pass_at_k(2) == 1.0
    assert "pass@2" in back._repr_html_() and str(out) in back._repr_html_()
    r.save(out)  # overwrite in place, no leftovers
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]
    with pytest.raises(NotFoundError, match="evaluate_local"):
        EvalResult.load(tmp_path / "missing")


def test_collect_and_breakdown_from_save_path(tmp_path):
    extra = {i: {"level": 1 + i % 2, "subject": "Algebra"} for i in range(4)}
    save = _write_save_path(tmp_path / "s", [1.0, 0.0, 1.0, 1.0], n=1, extra=extra)
    log = NOISE + _nemo_rl_block("m", "math500", 3.0, 4)
    res = nbtools.evals.collect(log, save_path=save)
    assert res.has_samples and res.accuracy == 0.75 and res.score_block.numerator == 3.0
    totals = nbtools.evals.collect(log)
    assert not totals.has_samples and totals.accuracy == 0.75 and totals.num_problems == 4
    table = nbtools.evals.plots.breakdown_table({"m": res}, by="level")
    assert list(table["level"]) == [1, 2] and list(table["accuracy"]) == [1.0, 0.5]
    assert nbtools.evals.plots.breakdown_table({"m": res}).equals(table)  # picks MATH-500's `level` first
    assert nbtools.evals.plots.breakdown({"m": res}, save=tmp_path / "by.png") is not None
    with pytest.raises(ConfigError, match="'level' and 'subject'"):
        nbtools.evals.plots.breakdown_table({"m": res}, by="difficulty")
    with pytest.raises(NotFoundError, match="job.wait"):
        nbtools.evals.collect(NOISE)


def test_plots_write_pngs(tmp_path):
    base, tuned = _result([False, True] * 10), _result([True, True] * 10)
    cmp = compare(base, tuned)
    for fig_path, fig in [
        (tmp_path / "acc.png", nbtools.evals.plots.accuracy({"b": base, "t": tuned}, save=tmp_path / "acc.png")),
        (tmp_path / "flip.png", nbtools.evals.plots.flip_matrix(cmp, save=tmp_path / "flip.png")),
    ]:
        assert fig is not None and fig_path.stat().st_size > 1000
    unpaired = compare((3, 10), (8, 10))  # no flip table: the figure says why instead of failing the notebook
    fig = nbtools.evals.plots.flip_matrix(unpaired, save=tmp_path / "none.png")
    assert "totals only" in fig.axes[0].texts[0].get_text()


# ------------------------------------------------------------------------------------------------ cluster job
@pytest.fixture()
def gke_cfg():
    return nbtools.config.load(REPO / "experiments" / "gke-b200-gemma3-1b.yaml", backend="gke")


def test_build_eval_job_entrypoint(gke_cfg):
    job = nbtools.evals.build_eval_job(gke_cfg, "/data/nemo-rl/gemma3-1b-b200/merged_hf", label="fine-tuned",
                                       overrides=["generation.vllm_cfg.max_model_len=8192"])
    ep = job.entrypoint
    assert ep.startswith("cd /opt/nemo-rl && python -u examples/run_eval.py --config examples/configs/evals/math_eval.yaml ")
    local = "/tmp/nbtools-models/gemma3-1b-b200/fine-tuned/merged_hf"  # issue 27 item 10: not mmap over gcsfuse
    assert job.local_copy[:2] == ("bash", "-c") and "/data/nemo-rl/gemma3-1b-b200/merged_hf" in job.local_copy[2]
    assert local in job.local_copy[2] and job.model_name == "/data/nemo-rl/gemma3-1b-b200/merged_hf"
    for part in (f"generation.model_name={local}", "data.dataset_name=math500",
                 "eval.num_tests_per_prompt=1", "eval.save_path=/data/nemo-rl/gemma3-1b-b200/eval/math500_fine-tuned",
                 "generation.temperature=0.0", "cluster.gpus_per_node=8", "generation.vllm_kwargs.block_size=32",
                 "generation.vllm_cfg.max_model_len=8192"):
        assert f" {part}" in ep
    assert "+" not in ep and job.submission_id.startswith("gemma3-1b-b200-eval-math500-fine-tuned-")
    assert job.to_command().startswith("ray job submit --address http://127.0.0.1:8265 --submission-id ")
    again = nbtools.evals.build_eval_job(gke_cfg, "/data/nemo-rl/gemma3-1b-b200/merged_hf", label="fine-tuned",
                                         overrides=["generation.vllm_cfg.max_model_len=8192"])
    assert again.submission_id == job.submission_id  # re-running re-attaches
    base, tuned = nbtools.evals.eval_jobs(gke_cfg, num_tests_per_prompt=4)
    assert "generation.model_name=google/gemma-3-1b-it" in base.entrypoint and tuned.temperature == 1.0
    assert base.local_copy == () and tuned.local_copy  # an HF id downloads to HF_HOME; the merged model is copied
    off = nbtools.evals.build_eval_job(gke_cfg, "/data/x/merged_hf", copy_to_local=False)
    assert off.local_copy == () and "generation.model_name=/data/x/merged_hf" in off.entrypoint
    assert base.save_path != tuned.save_path and tuned.label == "fine-tuned-sampled4"
    assert "-eval-math500-fine-tuned-sampled4-" in tuned.submission_id and "ray job submit" in base._repr_html_()


def test_dataset_names_validated_per_nemo_rl_version(gke_cfg):
    # Issue 14 item 6. Source: NeMo-RL nemo_rl/data/datasets/eval_datasets/__init__.py load_eval_dataset() (read at
    # commit 2e9b607f via the source index): `elif dataset_name == "aime2024"` / "aime2025" (lower case); any other
    # name falls to LocalMathDataset. The releases' own examples/configs/evals/*.yaml (tests/assets/nemo-rl/<tag>,
    # tag copies) must be accepted as they are.
    import yaml

    assets = Path(__file__).resolve().parents[1] / "assets" / "nemo-rl"
    for version in ("v0.5.0", "v0.7.0"):
        for f in sorted((assets / version / "examples" / "configs" / "evals").glob("*.yaml")):
            name = (yaml.safe_load(f.read_text()).get("data") or {}).get("dataset_name")
            if name:
                assert name in nbtools.evals.dataset_names(version), (version, f.name, name)
    v05 = gke_cfg.replace(**{"images.nemo_rl_version": "v0.5.0"})
    assert "data.dataset_name=aime2024" in nbtools.evals.build_eval_job(v05, "m", dataset="aime2024").entrypoint
    assert "data.dataset_name=aime2024" in nbtools.evals.build_eval_job(gke_cfg, "m", dataset="aime2024").entrypoint
    for cfg in (gke_cfg, v05):
        with pytest.raises(ConfigError, match=r"'AIME2024' is not a run_eval.py dataset[\s\S]*use 'aime2024'[\s\S]*lower case"):
            nbtools.evals.build_eval_job(cfg, "m", dataset="AIME2024")
    with pytest.raises(ConfigError, match="'daily-omni' is not a run_eval.py dataset in NeMo-RL v0.7.0"):
        nbtools.evals.build_eval_job(gke_cfg, "m", dataset="daily-omni")
    with pytest.raises(ConfigError, match="use 'math500'"):
        nbtools.evals.build_eval_job(gke_cfg, "m", dataset="math-500")
    assert "data.dataset_name=/data/my_eval.jsonl" in nbtools.evals.build_eval_job(gke_cfg, "m", dataset="/data/my_eval.jsonl").entrypoint


def test_overrides_reject_plus_prefix_and_unknown_sections(gke_cfg):
    with pytest.raises(ConfigError) as exc:
        nbtools.evals.build_eval_job(gke_cfg, "m", overrides=["++generation.vllm_kwargs.block_size=32", "policy.x=1", "oops"])
    text = str(exc.value)
    assert "3 problems" in text and "write 'generation.vllm_kwargs.block_size=32'" in text
    assert "unknown top-level section 'policy'" in text and "expected key=value" in text


def test_built_entrypoint_runs_against_the_run_eval_double(gke_cfg, tmp_path):
    """The exact override tokens build_eval_job emits, executed by a shell against the run_eval.py double."""
    import subprocess
    import sys

    script = tmp_path / "fake_run_eval.py"
    script.write_text(FAKE_RUN_EVAL)
    results = {}
    for label, model in (("baseline", "google/gemma-3-1b-it"), ("fine-tuned", "/data/run/merged_hf")):
        spec = nbtools.evals.build_eval_job(gke_cfg, model, label=label, save_path=str(tmp_path / label))
        assert spec.entrypoint.startswith(PREFIX)
        cmd = spec.entrypoint.replace(PREFIX, f"{sys.executable} -u {script}")
        log = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=True, timeout=120).stdout
        results[label] = nbtools.evals.collect(log, save_path=spec.save_path)
    base, tuned = results["baseline"], results["fine-tuned"]
    assert (base.score_block.model_name, tuned.score_block.model_name) == ("gemma-3-1b-it", "merged_hf")
    assert (base.accuracy, tuned.accuracy) == (0.25, 0.75) and base.params["dataset_name"] == "math500"
    cmp = compare(base, tuned, alpha=0.01)
    assert cmp.paired and cmp.flips == {"fixed": 20, "broken": 0, "both": 10, "neither": 10}
    assert cmp.p_value == pytest.approx(2 * 0.5**20) and cmp.significant


# ------------------------------------------------------------------------------------------------ hostile input
def _impossible(text_score: str, num: str, den: int) -> str:
    good = _nemo_rl_block("m", "math500", 201.0, 500)
    return good.replace("score=0.4020 (201.0/500)", f"score={text_score} ({num}/{den})")


def test_parse_keeps_complete_blocks_while_the_next_is_being_written():
    done = _nemo_rl_block("base", "math500", 201.0, 500)
    writing = _nemo_rl_block("tuned", "math500", 232.0, 500)
    for cut in ("max_new_tokens=", "metric=", "score=0.46"):  # the log ends inside the second block
        text = NOISE + done + writing.split(cut)[0] + cut
        (b,) = parse_score_blocks(text)
        assert (b.model_name, b.numerator) == ("base", 201.0)
        log = nbtools.evals.read_score_log(text)
        assert log.blocks == [b] and log.problems == [] and log.pending_line is not None
    assert nbtools.evals.read_score_log(NOISE + done + writing).pending_line is None


@pytest.mark.parametrize("score, num, den, why", [
    ("1.5000", "750.0", 500, "larger than the denominator"),
    ("0.9000", "201.0", 500, "disagrees with its fraction"),
    ("-0.0200", "-10.0", 500, "not a count"),
    ("0.0000", "0.0", 0, "not a number of problems"),
    ("nan", "1.0", 2, "outside [0, 1]"),
])
def test_parse_rejects_impossible_blocks_with_the_problem_listed(score, num, den, why):
    good = _nemo_rl_block("base", "math500", 201.0, 500)
    text = NOISE + good + _impossible(score, num, den)
    with pytest.raises(ConfigError, match=rf"score block #2 \(line \d+, m on math500\) is impossible: [^\n]*{re.escape(why)}"):
        parse_score_blocks(text)
    (b,) = parse_score_blocks(text, strict=False)  # the valid block is kept, the impossible one is not returned
    assert b.model_name == "base"
    log = nbtools.evals.read_score_log(text)
    assert len(log.problems) == 1 and why in log.problems[0] and log.blocks == [b]
    # a score printed with fewer decimals is held to its own precision
    assert parse_score_blocks(_impossible("0.4", "201.0", 500))[0].score == 0.4


def test_compare_refuses_impossible_totals_and_alpha():
    for a, why in (((0, 0), "not a number of problems"), ((5, 3), "exceed the total"), ((-1, 10), "not a count"),
                   ((1, 2.5), "not a number of problems"), ((float("nan"), 10), "not a count")):
        with pytest.raises(ConfigError, match=re.escape(why)):
            compare(a, (1, 2) if a[1] in (0, 2.5) else (1, a[1]))
    for alpha in (0, 1, 2, -0.1, float("nan"), True):
        with pytest.raises(ConfigError, match=r"(?s)alpha=.* is not a significance level.*fix: e.g. alpha=0.05"):
            compare((201, 500), (232, 500), alpha=alpha)
    bad_block = parse_score_blocks(_nemo_rl_block("m", "math500", 201.0, 500))[0]
    import dataclasses

    with pytest.raises(ConfigError, match="larger than the denominator"):
        compare(dataclasses.replace(bad_block, numerator=750.0, score=1.5), bad_block)
    table = _result([True, False]).table.assign(correct=[2, 0])
    with pytest.raises(ConfigError, match="not true/false"):
        compare(table, _result([True, False]))


def test_compare_refuses_different_problems_and_notes_different_settings():
    base = parse_score_blocks(_nemo_rl_block("base", "math500", 201.0, 500))[0]
    other_set = parse_score_blocks(_nemo_rl_block("tuned", "aime2024", 10.0, 30))[0]
    with pytest.raises(ConfigError, match=r"different datasets: baseline on 'math500', fine-tuned on 'aime2024'"
                       r"[\s\S]*different problem counts: 500 \(baseline\) vs 30[\s\S]*allow_mismatch=True"):
        compare(base, other_set)
    with pytest.warns(UserWarning) as seen:
        cmp = compare(base, other_set, allow_mismatch=True)
    assert sum("MISMATCH (allowed)" in n for n in cmp.notes) == 2 == sum("MISMATCH" in str(w.message) for w in seen)
    with pytest.raises(ConfigError, match="different problem counts: 500"):
        compare((201, 500), (50, 100))
    with pytest.raises(ConfigError, match="different problem sets: 2 and 2 problems, 0 in common"):
        compare(_result([True, False]), _result([True, True], ids=["x", "y"]))
    sampled = parse_score_blocks(_nemo_rl_block("tuned", "math500", 232.0, 500, n=4, temperature=0.6, top_k=20))[0]
    with pytest.warns(UserWarning, match="different settings"):
        cmp = compare(base, sampled)
    (note,) = [n for n in cmp.notes if n.startswith("MISMATCH")]
    assert "temperature 0.0 vs 0.6" in note and "top_k -1 vs 20" in note and "samples_per_prompt 1 vs 4" in note
    a, b = _result([True, False, True]), _result([True, True, True])
    a.params, b.params = {"temperature": 0.0, "max_new_tokens": 64}, {"temperature": 0.0, "max_new_tokens": 128}
    with pytest.warns(UserWarning, match="max_new_tokens 64 vs 128"):
        compare(a, b)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same problems, same settings: nothing to warn about
        assert not [n for n in compare(base, parse_score_blocks(_nemo_rl_block("t", "math500", 232.0, 500))[0]).notes
                    if "MISMATCH" in n]


def test_dataset_names_are_the_branches_of_the_release_s_load_eval_dataset(gke_cfg):
    """Issue 27 item 5: the names per release are read from the tag's own file (tests/assets/nemo-rl/<tag>/...)."""
    import ast

    assets = Path(__file__).resolve().parents[1] / "assets" / "nemo-rl"
    for version in ("v0.5.0", "v0.7.0"):
        src = (assets / version / "nemo_rl" / "data" / "datasets" / "eval_datasets" / "__init__.py.txt").read_text()
        names: set[str] = set()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Compare) and getattr(node.left, "id", None) == "dataset_name":
                for c in node.comparators:
                    names |= {e.value for e in getattr(c, "elts", [c]) if isinstance(getattr(e, "value", None), str)}
        names = {n for n in names if "/" not in n}  # an HF id (TwinkStart/MMAU) passes as an id anyway
        ours = set(nbtools.evals.dataset_names(version))
        assert names <= ours, (version, names - ours)
        assert {n for n in ours if not n.startswith("mmlu_")} <= names | {"mmlu"}, (version, ours - names)
    v07 = nbtools.evals.build_eval_job(gke_cfg, "m", dataset="aime2026").entrypoint
    assert "data.dataset_name=aime2026" in v07 and "data.dataset_name=mmau" in nbtools.evals.build_eval_job(
        gke_cfg, "m", dataset="mmau").entrypoint
    with pytest.raises(ConfigError, match="'aime2026' is not a run_eval.py dataset in NeMo-RL v0.5.0"):
        nbtools.evals.build_eval_job(gke_cfg.replace(**{"images.nemo_rl_version": "v0.5.0"}), "m", dataset="aime2026")


def test_the_eval_job_generates_as_long_as_the_benchmark_or_the_experiment(gke_cfg):
    """Issue 42 item 3: MATH-500 at 8192, as tutorial 000 scored it; another dataset at the experiment's length; never
    the eval config's silent 2048; the job says where its length came from (07's settings table shows it)."""
    job = nbtools.evals.build_eval_job(gke_cfg, "m", dataset="math500")
    assert "generation.vllm_cfg.max_model_len=8192" in job.overrides
    assert (job.length, job.length_from) == (8192, "MATH-500 as tutorial 000 scored it")
    gpqa = nbtools.evals.build_eval_job(gke_cfg, "m", dataset="gpqa")
    assert f"generation.vllm_cfg.max_model_len={gke_cfg.trainer.vllm_cfg['max_model_len']}" in gpqa.overrides
    assert gpqa.length_from == "the experiment's generation length"
    plain = gke_cfg.replace(**{"trainer.vllm_cfg": {}, "model.max_total_sequence_length": 4096})
    assert "generation.vllm_cfg.max_model_len=4096" in nbtools.evals.build_eval_job(plain, "m", dataset="gpqa").overrides
    both = nbtools.evals.eval_jobs(plain, dataset="math500")
    assert {o for j in both for o in j.overrides if "max_model_len" in o} == {"generation.vllm_cfg.max_model_len=8192"}
    given = nbtools.evals.build_eval_job(plain, "m", max_model_len=2048)
    assert (given.length, given.length_from) == (2048, "given") and "max_model_len=2048" in given.entrypoint
    with pytest.raises(ConfigError, match="positive number of tokens"):
        nbtools.evals.build_eval_job(plain, "m", max_model_len=0)


def test_the_gemma_experiment_evaluates_math500_at_8192():
    """Issue 42's done-when: the shipped Gemma experiment (tutorial 000) builds its MATH-500 jobs at 8192 tokens."""
    cfg = nbtools.config.load(REPO / "experiments" / "gke-b200-gemma3-1b.yaml")
    assert cfg.model.max_total_sequence_length < 8192  # the experiment's own length would be the wrong one
    for job in nbtools.evals.eval_jobs(cfg, dataset="math500"):
        assert "generation.vllm_cfg.max_model_len=8192" in job.overrides, job.overrides


def test_same_ids_on_different_problems_are_refused_or_noted():
    """#31: shared problem ids are not enough; where both tables carry prompts or ground truths they must agree."""
    rng = np.random.default_rng(7)
    base = _result(list(rng.random(60) < 0.3))
    tuned = _result(list(rng.random(60) < 0.8))
    base.table["prompt"] = [f"What is {i} + {i}?" for i in range(60)]
    tuned.table["prompt"] = [f"What is {i} * 3?" for i in range(60)]  # every problem changed, ids kept
    with pytest.raises(ConfigError, match=r"same problem ids, different problems: 60 of the 60 shared ids have a "
                                          r"different prompt in baseline and fine-tuned \(e\.g\. p0, p1, p2\)"
                                          r"[\s\S]*fix: evaluate both models on the same problems"):
        compare(base, tuned)
    with pytest.warns(UserWarning, match="MISMATCH"):
        cmp = compare(base, tuned, allow_mismatch=True)
    assert any("different prompt" in n for n in cmp.notes)
    tuned.table["prompt"] = base.table["prompt"]
    base.table["ground_truth"], tuned.table["ground_truth"] = "4", ["4"] * 59 + ["5"]
    with pytest.raises(ConfigError, match=r"1 of the 60 shared ids have a different ground truth .*\(e\.g\. p59\)"):
        compare(base, tuned)
    tuned.table["ground_truth"] = " 4 "  # same after surrounding whitespace
    assert compare(base, tuned).paired and not compare(base, tuned).notes


def test_importing_nbtools_evals_leaves_scipy_unimported_until_a_test_is_computed():
    """An evaluation job and ``nbtools eval-parse`` import nbtools.evals without computing a test (scipy: ~1.3 s)."""
    import subprocess
    import sys

    code = ("import sys, nbtools.evals as e; print('scipy.stats' in sys.modules); "
            "print(round(e.stats.mcnemar_exact(fixed=40, broken=9).p_value, 10), 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", str(round(stats.mcnemar_exact(fixed=40, broken=9).p_value, 10)), "True"], out


def test_the_accuracy_table_says_which_settings_were_used():
    """Issue 42 item 3: 07's table shows the dataset, temperature, generation length and where the length came from."""
    from nbtools.evals.plots import accuracy_table

    base = _result([True, False, True, False])
    base.params.update(temperature=0.0, max_new_tokens=8192, dataset="math500",
                       length_from="MATH-500 as tutorial 000 scored it")
    row = accuracy_table({"baseline": base}).iloc[0]
    assert (row["dataset"], row["temperature"], row["max_new_tokens"]) == ("math500", 0.0, 8192)
    assert row["length_from"] == "MATH-500 as tutorial 000 scored it"
