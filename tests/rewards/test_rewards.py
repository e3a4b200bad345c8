"""Tests for nbtools.rewards: built-ins (NeMo-RL semantics), registry, mixes, GRPO advantages, re-scoring.

NeMo-RL itself cannot run here; expected values are hand computations of the semantics of
``nemo_rl/environments/rewards.py`` and ``nemo_rl/algorithms/utils.py::calculate_baseline_and_std_per_prompt``.
math-verify is the real library.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from nbtools import rewards
from nbtools.errors import ConfigError, ConflictError, NotFoundError

FULL = "<think>4 > 3</think> <answer> 4 </answer>"


# ---------------------------------------------------------------- text helpers
def test_split_think_answer_and_extract_answer():
    assert rewards.split_think_answer(FULL) == ("4 > 3", "4")
    assert rewards.split_think_answer("no tags") == (None, None)
    assert rewards.split_think_answer("<think>a</think>") == ("a", None)
    assert rewards.split_think_answer("<r>x</r><a>5</a>", think_tag="r", answer_tag="a") == ("x", "5")
    # greedy like NeMo-RL's regex: first opening tag to the LAST closing tag
    assert rewards.extract_answer("<answer>1</answer> <answer>2</answer>") == "1</answer> <answer>2"
    assert rewards.extract_answer("</answer><answer>3") is None  # closing before opening only
    assert rewards.extract_answer("<answer><answer>5</answer>") == "<answer>5"  # nested / unbalanced


def test_extract_answer_reads_gsm8ks_answer_line_when_there_are_no_tags():
    """A verl run on GSM8K answers ``#### N`` (what verl's rule reads): the last one, commas dropped; tags win."""
    assert rewards.extract_answer("48 + 24 = 72. #### 72") == "72"
    assert rewards.extract_answer("#### 1 then #### -1,000") == "-1000"
    assert rewards.extract_answer("<answer> 4 </answer> #### 5") == "4"
    assert rewards.extract_answer("####5") is None and rewards.extract_answer("#### x") is None
    assert rewards.split_think_answer("<think> 3 0 6 </think> #### 6") == ("3 0 6", "6")


def test_tag_extraction_equals_nemo_rl_regex_on_random_strings():
    """Our linear-time search must capture exactly what NeMo-RL's greedy regex captures."""
    import random
    import re

    rng = random.Random(0)
    atoms = ["<answer>", "</answer>", "<think>", "</think>", "<answer", "answer>", "x", " ", "\n", "7"]
    pattern = re.compile(r"<answer>([\s\S]*)</answer>")
    for _ in range(3000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randrange(0, 12)))
        m = pattern.search(text)
        span = rewards._text.tag_span(text, "answer")
        assert (None if m is None else m.span(1)) == span, text


def test_bare_number_return_is_accepted():
    mix = rewards.combine([{"name": lambda gt, r: 0.5, "weight": 1.0}])
    assert mix("", "") == (0.5, None)


# ---------------------------------------------------------------- format
@pytest.mark.parametrize(
    "response, expected",
    [
        (FULL, 1.0),
        ("<answer>4</answer>", 0.75),
        ("<think>hmm</think> 4", 0.25),
        ("4", 0.0),
        ("<think>unclosed <answer>4</answer>", 0.75),
        ("</think>backwards<think> <answer>4", 0.0),
        ("<think><think>nested</think></think><answer>\n4\n</answer>", 1.0),
        ("", 0.0),
    ],
)
def test_format_reward(response, expected):
    assert rewards.get("format")("4", response) == (expected, None)


def test_format_reward_custom_tags():
    assert rewards.format_reward(
        "", "<reason>x</reason><final>y</final>", think_tag="reason", answer_tag="final"
    ) == (
        1.0,
        None,
    )
    assert rewards.format_reward("", FULL, think_tag="reason", answer_tag="final") == (0.0, None)


# ---------------------------------------------------------------- exact_alnum
@pytest.mark.parametrize(
    "gt, response, expected",
    [
        ("4", FULL, (1.0, True)),
        ("New York", "<answer>new-york!</answer>", (1.0, True)),
        ("B", "<answer>(b)</answer>", (1.0, True)),
        ("4", "<answer>5</answer>", (0.0, False)),
        ("4", "4", (0.0, False)),  # no tags, no credit
        ("a_b", "<answer>ab</answer>", (1.0, True)),  # underscore is not alphanumeric
        ("Ünï", "<answer>üNÏ</answer>", (1.0, True)),
    ],
)
def test_exact_alnum(gt, response, expected):
    assert rewards.exact_alnum(gt, response) == expected


def test_exact_alnum_matches_isalnum_definition():
    # NeMo-RL strips with str.isalnum(); a character is ignored exactly when it is not alphanumeric
    for code in range(0x20, 0x3000):
        c = chr(code)
        got = rewards.exact_alnum("x", f"<answer>x{c}</answer>")[0]
        assert got == (0.0 if c.isalnum() else 1.0), hex(code)


# ---------------------------------------------------------------- registry and mixes
def test_register_decorator_and_reregister_is_safe():
    @rewards.register("no_swearing_t")
    def no_swearing(ground_truth, response):
        return (0.0 if "damn" in response.lower() else 1.0), None

    try:
        assert "no_swearing_t" in rewards.available()
        assert rewards.get("no_swearing_t") is no_swearing
        again = rewards.register("no_swearing_t", lambda gt, r: (0.5, None))  # re-running the cell replaces
        assert rewards.get("no_swearing_t") is again
    finally:
        rewards.unregister("no_swearing_t")
    assert "no_swearing_t" not in rewards.available()


def test_register_refuses_builtin_and_bad_signature():
    with pytest.raises(ConflictError, match="pass replace=True"):
        rewards.register("format", lambda gt, r: (1.0, None))
    with pytest.raises(ConfigError, match="accept the two strings first"):
        rewards.register("bad_sig_t", lambda response: (1.0, None))
    with pytest.raises(NotFoundError, match=r"known: .*exact_alnum.*format"):
        rewards.get("nope")


def test_combine_renormalises_weights_and_ands_correctness():
    mix = rewards.combine([{"name": "format", "weight": 1}, {"name": "exact_alnum", "weight": 3}])
    np.testing.assert_allclose(mix.weights, [0.25, 0.75])
    assert mix("4", FULL) == (1.0, True)
    total, correct = mix("5", FULL)  # format 1.0, alnum 0.0
    assert total == pytest.approx(0.25) and correct is False
    total, correct = mix("4", "<answer>4</answer>")  # format 0.75, alnum 1.0
    assert total == pytest.approx(0.25 * 0.75 + 0.75) and correct is True
    only_format = rewards.combine([{"name": "format", "weight": 2.0}])
    assert only_format("4", FULL) == (1.0, None)  # no component judges correctness
    assert mix.spec() == [
        {"name": "format", "weight": 1.0, "kwargs": {}},
        {"name": "exact_alnum", "weight": 3.0, "kwargs": {}},
    ]


def test_combine_kwargs_are_passed():
    mix = rewards.combine(
        [{"name": "format", "weight": 1.0, "kwargs": {"think_tag": "r", "answer_tag": "a"}}]
    )
    assert mix("", "<r>x</r><a>y</a>") == (1.0, None)
    assert mix("", FULL) == (0.0, None)


def test_combine_reports_every_problem_at_once():
    spec = [
        {"name": "fromat", "weight": 1.0},
        {"name": "format", "weight": -1},
        {"name": "exact_alnum", "weight": 1.0, "kwargs": {"tag": "answer"}},
        {"name": "length_penalty", "weight": 1.0, "kwargs": {"max_length": 10, "buffer": 50}},
        {"name": "format", "weight": 1.0, "wieght": 2},
    ]
    with pytest.raises(ConfigError) as info:
        rewards.combine(spec)
    problems = info.value.problems
    assert len(problems) == 5, problems
    text = str(info.value)
    assert (
        "unknown reward 'fromat'; known: exact_alnum, exact_answer, format, length_penalty, math_expr" in text
    )
    assert "weight must be a finite number >= 0, got -1" in text
    assert "unknown kwargs ['tag']; exact_alnum accepts: answer_tag" in text
    assert "buffer must be an int in (0, max_length]" in text
    assert "unknown keys ['wieght']" in text


@pytest.mark.parametrize(
    "spec, match",
    [
        ([{"name": "format", "weight": 0.0}], "weights must sum to > 0"),
        ([], "non-empty list"),
        ({"name": "format", "weight": 1.0}, "non-empty list"),
        ([{"name": "format", "weight": float("nan")}], "finite number"),
        ([{"name": "format", "weight": "1"}], "finite number"),
        ([{"name": "format"}], "got None"),
    ],
)
def test_combine_weight_validation(spec, match):
    with pytest.raises(ConfigError, match=match):
        rewards.combine(spec)


def test_combine_accepts_callables_and_config_default():
    from nbtools.config import RehearsalConfig

    mix = rewards.combine(RehearsalConfig().reward_functions)
    assert mix.names == ["format", "exact_alnum"]

    def shout(ground_truth, response, word="YES"):
        return float(word in response), None

    mix2 = rewards.combine([{"name": shout, "weight": 1.0, "kwargs": {"word": "OK"}}])
    assert mix2("", "it is OK") == (1.0, None)
    with pytest.raises(ConfigError, match="shout accepts: word"):
        rewards.combine([{"name": shout, "weight": 1.0, "kwargs": {"wrd": "OK"}}])


def test_score_matches_call_and_dedupes():
    calls = []

    def counting(ground_truth, response):
        calls.append(response)
        return float(len(response) % 2), None

    mix = rewards.combine([{"name": "exact_alnum", "weight": 0.5}, {"name": counting, "weight": 0.5}])
    assert calls == []  # combine() dry-runs built-ins only
    gts = ["4", "4", "5", "4"]
    resps = [FULL, FULL, FULL, "<answer>4</answer>"]
    scores = mix.score(gts, resps)
    assert scores.dtype == np.float64 and scores.shape == (4,)
    np.testing.assert_allclose(scores, [mix(g, r)[0] for g, r in zip(gts, resps, strict=True)])
    assert len(calls) == 3 + 4  # the duplicated (gt, response) pair was graded once by score()
    frame = mix.score_components("4", [FULL, "x"])
    assert list(frame.columns) == ["exact_alnum", "counting", "reward", "correct"]
    assert frame["correct"].tolist() == [True, False]
    with pytest.raises(ConfigError, match="one ground truth per response"):
        mix.score(["4"], [FULL, FULL])


# ---------------------------------------------------------------- length penalty
@pytest.mark.parametrize("n, expected", [(0, 0.0), (800, 0.0), (900, -0.5), (1000, -1.0), (5000, -1.0)])
def test_length_penalty_dapo_shape(n, expected):
    assert rewards.length_penalty("", "x" * n, max_length=1000, buffer=200) == (pytest.approx(expected), None)


def test_length_penalty_words():
    assert rewards.length_penalty("", "a b c d e", max_length=4, buffer=2, unit="words") == (-1.0, None)
    assert rewards.length_penalty("", "a b c", max_length=4, buffer=2, unit="words") == (-0.5, None)


# ---------------------------------------------------------------- advantages
def _hand_advantages(r, leave_one_out, normalize, eps=1e-6):
    """Literal per-sample loops over the definitions in NeMo-RL's calculate_baseline_and_std_per_prompt."""
    out = []
    for row in r:
        g = len(row)
        out_row = []
        for i in range(g):
            pool = [row[j] for j in range(g) if j != i] if leave_one_out else list(row)
            n = len(pool)
            if len(set(pool)) == 1:  # exact arithmetic: equal values have exactly their mean and std 0
                mean, std = pool[0], 0.0
            else:
                mean = sum(pool) / n
                std = math.sqrt(sum((x - mean) ** 2 for x in pool) / (n - 1)) if n > 1 else 0.0
            a = row[i] - mean
            if normalize and std > 0:
                a = a / (std + eps)
            out_row.append(a)
        out.append(out_row)
    return np.array(out)


def test_group_advantages_hand_numbers():
    r = np.array([[1.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(
        rewards.group_advantages(r, leave_one_out=False, normalize=False), [[0.75, -0.25, -0.25, -0.25]]
    )
    # mean 0.25, sample std sqrt(0.75/3) = 0.5
    np.testing.assert_allclose(
        rewards.group_advantages(r, leave_one_out=False, normalize=True, eps=0.0), [[1.5, -0.5, -0.5, -0.5]]
    )
    # leave-one-out: sample 0 sees [0,0,0] (baseline 0, std 0 -> not normalised); others see [1,0,0]
    loo = rewards.group_advantages(r, leave_one_out=True, normalize=False)
    np.testing.assert_allclose(loo, [[1.0, -1 / 3, -1 / 3, -1 / 3]])
    loo_n = rewards.group_advantages(r, leave_one_out=True, normalize=True, eps=0.0)
    np.testing.assert_allclose(
        loo_n, [[1.0, -(1 / 3) / math.sqrt(1 / 3)] + [-(1 / 3) / math.sqrt(1 / 3)] * 2]
    )


@pytest.mark.parametrize("loo", [True, False])
@pytest.mark.parametrize("norm", [True, False])
def test_group_advantages_match_loop_definition(loo, norm):
    rng = np.random.default_rng(0)
    r = np.round(rng.random((5, 6)), 2)
    r[1] = 0.3  # a flat group
    r[2, :] = [1, 0, 0, 0, 0, 0]
    got = rewards.group_advantages(r, leave_one_out=loo, normalize=norm)
    np.testing.assert_allclose(got, _hand_advantages(r, loo, norm), atol=1e-12)
    assert np.all(got[1] == 0.0)  # flat group: exactly zero, no float residue


def test_group_advantages_no_blow_up_from_float_residue():
    """Seven equal rewards of 0.2 and one 1.0: the odd sample's leave-one-out std is exactly 0, not 1e-17."""
    r = np.array([[1.0] + [0.2] * 7])
    adv = rewards.group_advantages(r, leave_one_out=True, normalize=True)
    assert adv[0, 0] == pytest.approx(0.8)  # not normalised: its baseline samples are all equal
    np.testing.assert_allclose(adv, _hand_advantages(r, True, True), atol=1e-9)
    assert np.abs(adv).max() < 10


def test_group_advantages_edge_shapes():
    assert rewards.group_advantages(np.array([[0.7]]), leave_one_out=True, normalize=True).tolist() == [[0.0]]
    two = rewards.group_advantages(np.array([[1.0, 0.0]]), leave_one_out=True, normalize=True)
    np.testing.assert_allclose(two, [[1.0, -1.0]])  # each baseline is the other sample, std of one sample = 0
    with pytest.raises(ConfigError, match="reshape"):
        rewards.group_advantages(np.zeros(4), leave_one_out=True, normalize=True)


# ---------------------------------------------------------------- math-verify based (real math-verify)
@pytest.mark.parametrize(
    "gt, answer, expected",
    [
        ("0.5", "\\frac{1}{2}", 1.0),
        ("\\frac{1}{2}", "0.5", 1.0),
        ("\\frac{1}{2}", "1/2", 1.0),
        ("2", "\\boxed{2}", 1.0),
        ("\\sqrt{2}", "2^{1/2}", 1.0),
        ("3", "4", 0.0),
        ("\\frac{1}{2}", "0.51", 0.0),
        ("x+1", "1+x", 1.0),
    ],
)
def test_math_expr_latex_equivalence(gt, answer, expected):
    score, correct = rewards.math_expr(gt, f"<think>work</think> <answer>{answer}</answer>")
    assert score == expected and correct is (expected > 0.1)


def test_math_expr_missing_or_custom_tag():
    assert rewards.math_expr("2", "the answer is 2") == (0.0, False)  # no tag, no credit (NeMo-RL)
    assert rewards.math_expr("2", "<final>2</final>", tag="final") == (1.0, True)
    assert rewards.math_expr("2", "<answer>2") == (0.0, False)  # unbalanced


def test_nested_tags_follow_nemo_rl_greedy_capture():
    """NeMo-RL captures from the first <answer> to the last </answer>; math-verify then grades the last
    expression in that text, while exact_alnum compares the whole capture (seen in real rehearsal rollouts)."""
    response = "<think> 9 2 2 </think> <answer> 9 7 </think> <answer> 8 </answer>"
    assert rewards.math_expr("8", response) == (1.0, True)
    assert rewards.exact_alnum("8", response) == (0.0, False)
    assert rewards.format_reward("8", response) == (1.0, None)


def test_exact_answer_reads_boxed_or_tag():
    assert rewards.exact_answer("1/2", "so the result is \\boxed{0.5}.") == (1.0, True)
    assert rewards.exact_answer("1/2", "<answer>\\boxed{\\frac{1}{2}}</answer>") == (1.0, True)
    assert rewards.exact_answer("1/2", "<answer>0.5</answer> but \\boxed{3}") == (1.0, True)  # tag wins
    assert rewards.exact_answer("3", "\\boxed{4}") == (0.0, False)
    assert rewards.exact_answer("3", "") == (0.0, False)
    assert rewards.exact_answer("3", "\\boxed{3") == (0.0, False)  # unbalanced brace


ADVERSARIAL = [
    "<answer>" * 200_000,  # quadratic for a naive greedy regex
    "<think>" * 100_000 + "</answer>" * 100_000,
    "<answer>" + "9" * 2_000_000 + "</answer>",  # huge answer
    "<answer>\\frac{" * 5_000 + "</answer>",  # unbalanced LaTeX
    "<answer><answer><answer>1</answer></answer>",
    "\\boxed{" * 50_000,
    "\x00\udcff<answer>\u202e1</answer>",
]


@pytest.mark.parametrize("response", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_every_builtin_survives_adversarial_input(response):
    for name in rewards.available():
        score, correct = rewards.get(name)("1", response)
        assert isinstance(score, float) and math.isfinite(score), name
        assert correct in (None, True, False), name


def test_math_verify_timeout_grades_zero():
    # sympy evaluating (10^10)! takes far longer than the 1 s alarm; math-verify's own timeout fires
    score, correct = rewards.math_expr("1", "<answer>(10^{10})!</answer>", timeout=1)
    assert (score, correct) == (0.0, False)
    assert rewards.math_expr("1", "<answer>1</answer>", timeout=1) == (1.0, True)  # and grading still works


@pytest.mark.slow  # math-verify in many threads
def test_math_grading_from_worker_threads():
    """math-verify's signal timeouts fail outside the main thread; grading there goes to a helper process."""
    cases = [("0.5", "<answer>\\frac{1}{2}</answer>", 1.0), ("3", "<answer>4</answer>", 0.0)] * 3
    cases.append(("1", "<answer>(10^{10})!</answer>", 0.0))  # times out inside the helper, which survives
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(lambda c: rewards.math_expr(c[0], c[1], timeout=1)[0], cases))
    assert got == [c[2] for c in cases]
    assert threading.current_thread() is threading.main_thread()


@pytest.mark.slow  # waits out a hung helper
def test_helper_is_killed_and_restarted_when_it_hangs():
    """A hard bound holds even when math-verify's own alarm is disabled (seconds=None)."""
    from nbtools.rewards import _mathverify

    t0 = time.monotonic()
    score = _mathverify._HELPER.grade("\\boxed{1}", "\\boxed{(10^{10})!}", None, bound=1.0)
    assert score == 0.0
    assert time.monotonic() - t0 < 30  # bounded (not a speed assertion: the unbounded call never returns)
    assert _mathverify._HELPER._proc is None  # killed
    assert _mathverify._HELPER.grade("\\boxed{2}", "\\boxed{2}", 5, bound=60.0) == 1.0  # fresh helper works


# ---------------------------------------------------------------- re-scoring
def _resp(ans):
    return f"<think>look</think> <answer>{ans}</answer>"


def _toy_run():
    """Two steps; stored rewards were format-only (0.2 for a tagged answer), G=4 per prompt."""
    rows = []
    # step 1, prompt A (gt 3): all tagged -> old all 1.0 (no signal); new exact_alnum differs -> signal
    for i, a in enumerate(["3", "3", "2", "1"]):
        rows.append({"step": 1, "idx": i, "prompt": "max 1 2 3", "response": _resp(a), "reward": 1.0})
    # step 1, prompt B (gt 5): old [1,0,0,0] (one untagged); new: all wrong -> no signal
    for i, (a, r) in enumerate([("4", 1.0), ("4", 0.0), ("4", 0.0), ("4", 0.0)]):
        rows.append({"step": 1, "idx": 4 + i, "prompt": "max 5 4 0", "response": _resp(a), "reward": r})
    # step 2, prompt A again: old [1,1,0,0], new [1,0,0,0]
    for i, (a, r) in enumerate([("3", 1.0), ("2", 1.0), ("2", 0.0), ("2", 0.0)]):
        rows.append({"step": 2, "idx": i, "prompt": "max 1 2 3", "response": _resp(a), "reward": r})
    df = __import__("pandas").DataFrame(rows)
    df["advantage"] = 0.0
    return df.sample(frac=1.0, random_state=0)  # order must not matter: rescore sorts by (step, idx)


def _gt(prompt):
    return str(max(int(d) for d in prompt.split()[1:]))


def test_a_mix_may_name_a_reward_twice():
    """NeMo-RL builds its mix from a list, so one reward can come twice (here with other kwargs); each keeps its
    own column and the total weighs both, in the trainer's scoring and in rescore."""
    spec = [{"name": "format", "weight": 0.5}, {"name": "exact_alnum", "weight": 0.25},
            {"name": "format", "weight": 0.25, "kwargs": {"answer_tag": "final"}}]
    mix = rewards.combine(spec)
    assert mix.labels == ["format", "exact_alnum", "format#2"]
    scores = mix.score_components(["3"], ["<think>x</think> <answer>3</answer>"])
    assert scores.loc[0, ["format", "exact_alnum", "format#2"]].tolist() == [1.0, 1.0, 0.25]
    assert scores.loc[0, "reward"] == pytest.approx(0.5 + 0.25 + 0.25 * 0.25)
    result = rewards.rescore(_toy_run(), spec, ground_truth=_gt)
    s = result.samples
    assert {"r_format", "r_exact_alnum", "r_format#2"} <= set(s.columns)
    assert np.allclose(s["new_reward"], 0.5 * s["r_format"] + 0.25 * s["r_exact_alnum"] + 0.25 * s["r_format#2"])
    assert rewards.combine([{"name": "format", "weight": 1.0}]).labels == ["format"]


def test_rescore_flips_and_advantages():
    result = rewards.rescore(_toy_run(), [{"name": "exact_alnum", "weight": 1.0}], ground_truth=_gt)
    s, g = result.samples, result.groups
    assert list(g["size"]) == [4, 4, 4] and list(g["step"]) == [1, 1, 2]
    assert list(g["old_signal"]) == [False, True, True]
    assert list(g["new_signal"]) == [True, False, True]
    assert result.flipped_to_signal == 1 and result.flipped_to_no_signal == 1
    np.testing.assert_allclose(s["new_reward"], [1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0])
    expected_new = rewards.group_advantages(
        s["new_reward"].to_numpy().reshape(3, 4), leave_one_out=True, normalize=True
    ).ravel()
    np.testing.assert_allclose(s["new_advantage"], expected_new)
    # hand numbers, group 1 new rewards [1,1,0,0] with leave-one-out, no normalisation: 1 - 1/3, 0 - 2/3
    plain = rewards.rescore(
        _toy_run(), [{"name": "exact_alnum", "weight": 1.0}], ground_truth=_gt, normalize=False
    )
    np.testing.assert_allclose(plain.samples["new_advantage"][:4], [2 / 3, 2 / 3, -2 / 3, -2 / 3])
    assert np.all(plain.samples["old_advantage"][:4] == 0.0)
    summary = result.summary()
    assert summary["flipped_to_signal"] == 1 and summary["groups"] == 3 and summary["samples"] == 12
    assert summary["stored_advantage_max_diff"] == pytest.approx(
        np.abs(s["old_advantage"]).max()
    )  # stored 0.0
    stored = _toy_run().sort_values(["step", "idx"])
    stored["advantage"] = s[
        "old_advantage"
    ].to_numpy()  # what a trainer with these settings would have stored
    again = rewards.rescore(stored, [{"name": "exact_alnum", "weight": 1.0}], ground_truth=_gt)
    assert again.summary()["stored_advantage_max_diff"] == 0.0
    assert summary["new_accuracy"] == pytest.approx(3 / 12)
    table = result.table()
    assert list(table["step"]) == [1, 2]
    assert list(table["gained_signal"]) == [1, 0] and list(table["lost_signal"]) == [1, 0]
    assert table.loc[0, "new_reward"] == pytest.approx(0.25)
    assert list(result.flipped_samples()["prompt"].unique()) == ["max 1 2 3"]
    assert list(result.flipped_samples("to_no_signal")["prompt"].unique()) == ["max 5 4 0"]
    with pytest.raises(ConfigError, match="to_no_signal"):
        result.flipped_samples("up")
    assert "r_exact_alnum" in s and "<b>RescoreResult</b>" in result._repr_html_()


def test_rescore_group_size_and_ground_truth_column():
    df = _toy_run()
    df["ground_truth"] = df["prompt"].map(_gt)
    by_prompt = rewards.rescore(df, rewards.combine([{"name": "exact_alnum", "weight": 1.0}]))
    by_size = rewards.rescore(df, [{"name": "exact_alnum", "weight": 1.0}], group_size=2)
    assert len(by_prompt.groups) == 3 and len(by_size.groups) == 6
    with pytest.raises(ConfigError, match="group_size=None"):
        rewards.rescore(df, [{"name": "exact_alnum", "weight": 1.0}], group_size=3)


def test_rescore_ragged_groups_and_plain_frame():
    """Dynamic sampling can leave groups of different sizes; each size is one group_advantages call."""
    import pandas as pd

    df = pd.DataFrame(
        {
            "prompt": ["a"] * 3 + ["b"] * 2,
            "response": [_resp(x) for x in ["1", "2", "1", "1", "1"]],
            "ground_truth": ["1"] * 5,
        }
    )
    result = rewards.rescore(df, [{"name": "exact_alnum", "weight": 1.0}], normalize=False)
    assert list(result.groups["size"]) == [3, 2]
    np.testing.assert_allclose(result.samples["new_advantage"], [0.5, -1.0, 0.5, 0.0, 0.0])
    assert result.samples["old_reward"].isna().all() and not result.groups["old_signal"].any()
    format_only = rewards.rescore(df, [{"name": "format", "weight": 1.0}])  # nothing judges correctness
    assert (
        math.isnan(format_only.summary()["new_accuracy"]) and format_only.table()["new_accuracy"].isna().all()
    )


def test_rescore_errors_name_the_fix():
    import pandas as pd

    df = _toy_run()
    with pytest.raises(ConfigError, match="ground_truth_for"):
        rewards.rescore(df, [{"name": "format", "weight": 1.0}])  # no ground_truth column
    with pytest.raises(ConfigError, match="open_run"):
        rewards.rescore(pd.DataFrame({"text": ["x"]}), [{"name": "format", "weight": 1.0}], ground_truth=_gt)

    def broken(prompt):
        raise ValueError("not my task")

    with pytest.raises(ConfigError, match="failed on prompt 'max 1 2 3'"):
        rewards.rescore(df, [{"name": "format", "weight": 1.0}], ground_truth=broken)


def test_plot_rescore_saves_png(tmp_path):
    from matplotlib.figure import Figure

    from nbtools.rewards import display

    result = rewards.rescore(_toy_run(), [{"name": "exact_alnum", "weight": 1.0}], ground_truth=_gt)
    out = tmp_path / "figures" / "rescore.png"
    fig = rewards.display.plot_rescore(result, save=out)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.parent.iterdir()] == ["rescore.png"]  # no temp file left behind
    assert display.plot_rescore is rewards.display.plot_rescore


def test_rescore_and_plot_an_empty_run():
    """Early in a run no step is written yet: an empty but valid result and figure, not an exception."""
    import pandas as pd

    empty = pd.DataFrame(
        {"step": [], "idx": [], "prompt": [], "response": [], "ground_truth": [], "reward": []}
    )
    result = rewards.rescore(empty, [{"name": "format", "weight": 1.0}])
    assert result.summary()["samples"] == 0 and result.table().empty
    assert len(rewards.display.plot_rescore(result).axes) == 3


def _write_nemo_rl_run(log_dir, steps):
    """NeMo-RL's Logger.log_batched_dict_as_jsonl layout: exp_001/train_data_step{N}.jsonl, length-1 fields."""
    import json

    exp = log_dir / "exp_001"
    exp.mkdir(parents=True)
    for step, rows in steps.items():
        lines = []
        for i, (prompt, response, reward) in enumerate(rows):
            env = "Environment: correct" if reward > 0.5 else "Environment: incorrect"
            rec = {
                "content": [[prompt, response, env]],
                "rewards": [reward],
                "input_lengths": [12],
                "token_ids": [[5, 6, 7, 0]],
                "token_loss_mask": [[0, 1, 1, 0]],
                "sample_loss_mask": [1.0],
                "advantages": [[0.0, 0.0, 0.0, 0.0]],
                "generation_logprobs": [[0.0, -0.1, -0.2, 0.0]],
                "prev_logprobs": [[0.0, -0.1, -0.2, 0.0]],
                "idx": i,
            }
            lines.append(json.dumps(rec))
        (exp / f"train_data_step{step}.jsonl").write_text("\n".join(lines) + "\n")


def test_rescore_reads_a_nemo_rl_run_through_trajectories(tmp_path):
    """End to end on NeMo-RL's jsonl format: trajectories.open_run(...).read() -> rescore with the rehearsal task."""
    from nbtools import trajectories
    from nbtools.rehearsal.task import format_prompt, format_response, ground_truth_for

    old = rewards.combine([{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}])
    p1, p2 = format_prompt((3, 0, 6)), format_prompt((1, 1, 2))
    answers = {
        1: [(p1, "6"), (p1, "6"), (p2, "1"), (p2, "0")],
        2: [(p1, "6"), (p1, "3"), (p2, "2"), (p2, "2")],
    }
    steps = {
        s: [
            (p, format_response("x", a), old(ground_truth_for(p), format_response("x", a))[0])
            for p, a in rows
        ]
        for s, rows in answers.items()
    }
    _write_nemo_rl_run(tmp_path / "logs", steps)
    df = trajectories.open_run(tmp_path / "logs").read()
    same = rewards.rescore(df, old, ground_truth=ground_truth_for)
    assert same.summary()["changed_rewards"] == 0  # the same mix reproduces the stored rewards

    def closeness(ground_truth, response):
        return 1.0 - abs(int(rewards.extract_answer(response)) - int(ground_truth)) / 9, None

    spec = [*old.spec(), {"name": closeness, "weight": 0.5}]
    new = rewards.rescore(df, spec, ground_truth=ground_truth_for)
    assert list(new.groups["size"]) == [2, 2, 2, 2]
    assert list(new.groups["old_signal"]) == [False, False, True, False]
    assert list(new.groups["new_signal"]) == [False, True, True, False]  # wrong-in-different-ways now differs
    assert new.flipped_to_signal == 1 and list(new.samples["step"]) == [1, 1, 1, 1, 2, 2, 2, 2]


def test_rescore_with_the_experiment_scores_as_the_run_did(tmp_path):
    """``rescore(df, mix, cfg=cfg)``: the ground truth of the experiment's dataset and its GRPO settings; what the
    caller passes wins."""
    from pathlib import Path

    import pandas as pd

    import nbtools
    from nbtools import trajectories
    from nbtools.rehearsal.task import format_prompt, format_response, ground_truth_for

    mix = rewards.combine([{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}])
    p1, p2 = format_prompt((3, 0, 6)), format_prompt((1, 1, 2))
    rows = [(p1, "6"), (p1, "3"), (p1, "6"), (p2, "2"), (p2, "1"), (p2, "0")]
    _write_nemo_rl_run(tmp_path / "logs", {1: [(p, format_response("x", a), 0.0) for p, a in rows]})
    df = trajectories.open_run(tmp_path / "logs").read()
    local = Path(__file__).resolve().parents[2] / "experiments" / "local.yaml"
    cfg = nbtools.config.load(local, overrides={"local.runs_dir": str(tmp_path), "grpo.use_leave_one_out_baseline": True,
                                                "grpo.normalize_rewards": False})
    by_cfg = rewards.rescore(df, mix, cfg=cfg, progress=False)
    spelled = rewards.rescore(df, mix, ground_truth=ground_truth_for, leave_one_out=True, normalize=False, progress=False)
    pd.testing.assert_frame_equal(by_cfg.samples, spelled.samples)
    assert by_cfg.samples["ground_truth"].tolist() == ["6"] * 3 + ["2"] * 3
    defaults = rewards.rescore(df, mix, ground_truth=ground_truth_for, progress=False)  # leave-one-out, normalised
    assert not np.allclose(by_cfg.samples["new_advantage"], defaults.samples["new_advantage"])
    mine = rewards.rescore(df, mix, cfg=cfg, leave_one_out=False, normalize=True, ground_truth=lambda p: "6", progress=False)
    assert mine.samples["ground_truth"].eq("6").all()
    pd.testing.assert_series_equal(
        mine.samples["new_advantage"],
        rewards.rescore(df, mix, ground_truth=lambda p: "6", leave_one_out=False, normalize=True,
                        progress=False).samples["new_advantage"])


def test_a_verl_gsm8k_run_rescores_with_verls_rule_and_the_answers_its_dumps_carry(tmp_path):
    """A verl run on gsm8k scored with verl's GSM8K rule (v0.7.0 verl/utils/reward_score/gsm8k.py, strict) against the
    dumps' ``gts``: the mix it trained with is that rule, and re-scoring reproduces the stored scores (a boxed answer
    that math-verify would accept scores 0 under verl's rule)."""
    from pathlib import Path

    from nbtools import config, trajectories
    from nbtools.trainers.verl.files import dump_generations

    outputs = ["48 + 24 = 72 #### 72", "so \\boxed{72}", "#### 71", "#### 72", "#### 10", "#### 1,0", "10", "#### 9"]
    scores = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    dump_generations(tmp_path / "rollout_data", 1, inputs=["q72"] * 4 + ["q10"] * 4, outputs=outputs,
                     gts=["72"] * 4 + ["10"] * 4, scores=scores)
    cfg = config.load(Path(__file__).resolve().parents[2] / "experiments" / "gke-b200-verl.yaml")
    assert rewards.trained_with(cfg) == [{"name": "verl_gsm8k", "weight": 1.0}]
    df = trajectories.open_run(tmp_path / "rollout_data").read()
    result = rewards.rescore(df, rewards.combine(rewards.trained_with(cfg)), cfg=cfg)
    assert result.samples["new_reward"].tolist() == scores and result.summary()["changed_rewards"] == 0


def test_rescore_summary_reads_as_a_sentence_not_a_series_repr():
    """Issue 45: 08's summary showed as a pandas Series repr (``Name: rescore, dtype: object``, 16-digit floats)."""
    from nbtools.rewards._rescore import RescoreSummary

    s = RescoreSummary({"samples": 12, "groups": 3, "steps": 2, "old_mean_reward": 0.8888888888888888,
                        "new_mean_reward": 0.5, "changed_rewards": 4, "old_signal_groups": 1, "new_signal_groups": 2,
                        "flipped_to_signal": 1, "flipped_to_no_signal": 0, "new_accuracy": 0.5,
                        "stored_advantage_max_diff": 1.2e-7})
    text = repr(s)
    assert text.startswith("re-scored 12 samples in 3 groups over 2 steps: mean reward 0.889 → 0.5, 4 rewards changed")
    assert "within 1.2e-07" in text and "dtype" not in text and "0.8888" not in text
    assert "<td>old mean reward</td><td>0.889</td>" in s._repr_html_() and s["changed_rewards"] == 4


@pytest.mark.parametrize("response", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_the_shipped_example_reward_survives_adversarial_input(response):
    """experiments/my_rewards.py is what users copy: a 2,000,000-digit answer once raised int()'s digit limit."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_example_rewards", Path(__file__).resolve().parents[2] / "experiments" / "my_rewards.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        score, _ = module.closeness("42", response)
    finally:
        rewards.unregister("closeness")
    assert 0.0 <= score <= 1.0
