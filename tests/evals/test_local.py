"""nbtools.evals local path: real transformers generation with a tiny random Llama and a word-level tokenizer
built in code (no hub download), graded through nbtools.rewards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbtools
from nbtools.errors import ConfigError, NotFoundError
from nbtools.evals import compare, evaluate_local

REPO = Path(__file__).resolve().parents[2]
WORDS = ["<pad>", "<unk>", "<eos>", "<|user|>", "<|assistant|>", "<think>", "</think>", "<answer>", "</answer>",
         "max", *[str(d) for d in range(10)]]


def _save_tiny_model(out: Path, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    torch.manual_seed(seed)
    conf = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                       tie_word_embeddings=True, pad_token_id=0, eos_token_id=2, bos_token_id=None)
    model = LlamaForCausalLM(conf)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return _save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _problems(k: int = 12):
    # different prompt lengths, so left padding matters in a batch
    return [{"id": f"q{i}", "prompt": f"<|user|> max {' '.join(str((i + j) % 10) for j in range(1 + i % 4))} <|assistant|>",
             "ground_truth": str(i % 10), "level": 1 + i % 3} for i in range(k)]


def _first_token(gt: str, response: str):
    ok = response.split()[:1] == [gt]
    return float(ok), ok


def test_batched_greedy_equals_one_at_a_time(tiny):
    batched = evaluate_local(tiny, _problems(), reward=_first_token, max_new_tokens=6, batch_size=64)
    single = evaluate_local(tiny, _problems(), reward=_first_token, max_new_tokens=6, batch_size=1)
    t = batched.table
    assert list(t.columns[:6]) == ["problem_id", "sample", "prompt", "response", "extracted_answer", "correct"]
    assert len(t) == 12 and t["sample"].eq(0).all() and "level" in t.columns
    assert list(t["response"]) == list(single.table["response"])
    assert all("<pad>" not in r and "<eos>" not in r for r in t["response"])
    # identical models (here: the same model twice) -> no significant difference
    cmp = compare(batched, single)
    assert cmp.paired and cmp.p_value == 1.0 and not cmp.significant


def test_grading_uses_the_reward_flag(tiny):
    greedy = evaluate_local(tiny, _problems(), reward=_first_token, max_new_tokens=4)
    firsts = [r.split()[0] if r.split() else "" for r in greedy.table["response"]]
    probs = _problems()
    for i, p in enumerate(probs):  # make exactly the even problems answerable
        p["ground_truth"] = firsts[i] if i % 2 == 0 else "never"
    res = evaluate_local(tiny, probs, reward=_first_token, max_new_tokens=4)
    assert list(res.table["correct"]) == [i % 2 == 0 for i in range(12)] and res.accuracy == 0.5
    # a NeMo-RL reward spec through nbtools.rewards: correctness comes from exact_alnum, not the format share
    spec = [{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}]
    graded = evaluate_local(tiny, probs, reward=spec, max_new_tokens=4)
    expected = [nbtools.rewards.combine(spec)(gt, r) for gt, r in zip(graded.table["ground_truth"], graded.table["response"], strict=True)]
    assert list(graded.table["reward"]) == [e[0] for e in expected]
    assert list(graded.table["correct"]) == [bool(e[1]) for e in expected]
    assert list(graded.table["extracted_answer"]) == [nbtools.rewards.extract_answer(r) for r in graded.table["response"]]


def test_sampled_n_per_problem_is_seeded_and_gives_pass_at_k(tiny):
    a = evaluate_local(tiny, _problems(6), reward=_first_token, n=4, temperature=1.0, max_new_tokens=5, seed=7, batch_size=8)
    b = evaluate_local(tiny, _problems(6), reward=_first_token, n=4, temperature=1.0, max_new_tokens=5, seed=7, batch_size=8)
    assert len(a.table) == 24 and sorted(a.table["sample"].unique()) == [0, 1, 2, 3] and a.n == 4
    assert list(a.table["response"]) == list(b.table["response"])
    assert a.table.groupby("problem_id")["response"].nunique().max() > 1  # really sampled
    assert 0.0 <= a.pass_at_k(1) <= a.pass_at_k(2) <= a.pass_at_k(4) <= 1.0
    assert a.pass_at_k(1) == pytest.approx(a.accuracy)


def test_out_dir_is_reused_and_invalidated(tiny, tmp_path, monkeypatch):
    out = tmp_path / "eval" / "base"
    first = evaluate_local(tiny, _problems(), reward=_first_token, max_new_tokens=4, out_dir=out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_problems"] == 12 and summary["params"]["fingerprint"]

    def boom(*a, **k):
        raise AssertionError("generation should have been skipped")

    monkeypatch.setattr("nbtools.evals.run._generate", boom)
    again = evaluate_local(tiny, _problems(), reward=_first_token, max_new_tokens=4, out_dir=out)
    assert list(again.table["response"]) == list(first.table["response"]) and again.path == out.resolve()
    with pytest.raises(AssertionError, match="skipped"):  # another setting -> regenerate
        evaluate_local(tiny, _problems(), reward=_first_token, max_new_tokens=5, out_dir=out)


def test_errors_name_the_fix(tiny, tmp_path):
    with pytest.raises(NotFoundError, match="notebook 06"):
        evaluate_local(tmp_path / "no_model", _problems(), reward=_first_token)
    with pytest.raises(ConfigError, match="set temperature > 0"):
        evaluate_local(tiny, _problems(), reward=_first_token, n=4)
    with pytest.raises(ConfigError, match="ground_truth"):
        evaluate_local(tiny, [{"id": "a", "prompt": "x"}], reward=_first_token)
    with pytest.raises((ConfigError, NotFoundError), match="known"):
        evaluate_local(tiny, _problems(), reward="no_such_reward")


def test_evaluate_flow_on_a_local_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = nbtools.config.load(REPO / "experiments" / "local.yaml", backend="local")
    cfg = cfg.replace(**{"rehearsal.num_test": 20})
    with pytest.raises(NotFoundError, match="notebook 03|rehearsal"):
        nbtools.evals.local_models(cfg)
    _save_tiny_model(cfg.run_dir / "baseline_hf", seed=1)
    with pytest.raises(NotFoundError, match="notebook 06"):
        nbtools.evals.evaluate(cfg, "fine-tuned")
    _save_tiny_model(cfg.run_dir / "merged_hf", seed=2)
    base = nbtools.evals.evaluate(cfg, "baseline")
    sampled = nbtools.evals.evaluate(cfg, "baseline", n=2)
    assert base.num_problems == 20 and base.n == 1 and sampled.n == 2 and sampled.params["temperature"] == 1.0
    assert (cfg.run_dir / "eval" / "baseline_greedy" / "results.parquet").is_file()
    assert (cfg.run_dir / "eval" / "baseline_sampled2" / "summary.json").is_file()
    assert set(base.table["problem_id"]) == {p.id for p in nbtools.rehearsal.task.held_out_problems(cfg)}


def test_text_generation_is_a_quiet_transformers_pipeline(tiny, capsys):
    """06's load-and-generate: a real transformers pipeline of the model dir, greedy like the evaluation's own
    generation, and without transformers' "Loading weights" bar (saved as a stuck 0% widget in a notebook)."""
    from transformers import Pipeline
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    generate = nbtools.evals.text_generation(str(tiny))
    assert isinstance(generate, Pipeline) and hf_logging.is_progress_bar_enabled()  # switched back on after
    assert "Loading weights" not in capsys.readouterr().err
    prompt = _problems(1)[0]["prompt"]
    out = generate(prompt, max_new_tokens=4, do_sample=False, return_full_text=False)[0]["generated_text"]
    expected = evaluate_local(tiny, _problems(1), reward=_first_token, max_new_tokens=4).table["response"].iloc[0]
    assert out.split() == expected.split()[:len(out.split())] and out.strip()


def test_evaluate_asks_the_trainers_registry_once(tmp_path, monkeypatch):
    """``evaluate`` resolves the trainer once and passes it to the model paths and the evaluator (it asked three
    times: the plan, the baseline's path, the evaluation)."""
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path / "runs"))
    cfg = nbtools.config.load(REPO / "experiments" / "local.yaml", backend="local")
    for d in ("baseline_hf", "merged_hf"):
        (cfg.run_dir / d).mkdir(parents=True)
        (cfg.run_dir / d / "config.json").write_text("{}")
    asked, real = [], nbtools.trainers.get
    monkeypatch.setattr(nbtools.trainers, "get", lambda *a, **k: asked.append(a) or real(*a, **k))
    ran = []
    monkeypatch.setattr(nbtools.evals.flow.HELD_OUT_HERE, "run", lambda c, model, **kw: ran.append(model) or "result")
    assert nbtools.evals.evaluate(cfg, "fine-tuned") == "result"
    assert ran == [str(cfg.run_dir / "merged_hf")] and len(asked) == 1
