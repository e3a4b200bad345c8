"""Built-in rewards registered under NeMo-RL's names (``nemo_rl/environments/rewards.py`` semantics)."""

from __future__ import annotations

from nbtools.errors import ConfigError
from nbtools.rewards._mathverify import boxed, grade
from nbtools.rewards._registry import register
from nbtools.rewards._text import gsm8k_answer, tag_span

__all__ = ["format_reward", "math_expr", "exact_answer", "exact_alnum", "length_penalty", "verl_gsm8k"]


def _alnum_lower(text: str) -> str:
    """NeMo-RL's filter (keep ``str.isalnum()`` characters, then lower-case); ``filter`` is its fastest form."""
    return "".join(filter(str.isalnum, text)).lower()


def _text(x: object) -> str:
    return x if isinstance(x, str) else ("" if x is None else str(x))


def _content(response: str, tag: str) -> str | None:
    span = tag_span(response, tag)
    return None if span is None else response[span[0] : span[1]]


@register("format", _builtin=True)
def format_reward(
    ground_truth: str, response: str, think_tag: str = "think", answer_tag: str = "answer"
) -> tuple[float, None]:
    """0.25 when ``<think>…</think>`` is present plus 0.75 when ``<answer>…</answer>`` is; correctness is None.

    Why: shapes the output format without claiming anything about correctness (NeMo-RL ``format_reward``).

    Example:
        >>> format_reward("", "<think>a</think> <answer>b</answer>")
        (1.0, None)
    """
    response = _text(response)
    score = 0.0
    if tag_span(response, think_tag) is not None:
        score += 0.25
    if tag_span(response, answer_tag) is not None:
        score += 0.75
    return score, None


@register("math_expr", _builtin=True)
def math_expr(
    ground_truth: str, response: str, tag: str = "answer", timeout: float | None = 5.0, max_chars: int = 4096
) -> tuple[float, bool]:
    r"""math-verify on the ``<tag>`` content vs ``\boxed{ground_truth}`` (NeMo-RL ``math_expression_reward``).

    Why: ``\frac{1}{2}`` and ``0.5`` are the same answer. Answers longer than ``max_chars`` grade 0.0 without
    parsing; ``timeout`` bounds each math-verify stage, in any thread.

    Example:
        >>> math_expr("0.5", "<answer>\\frac{1}{2}</answer>")
        (1.0, True)
    """
    answer = _content(_text(response), tag)
    if answer is None or len(answer) > max_chars:
        return 0.0, False
    score = grade(boxed(_text(ground_truth)), boxed(answer), timeout=timeout)
    return score, score > 0.1


@register("exact_answer", _builtin=True)
def exact_answer(
    ground_truth: str, response: str, tag: str = "answer", timeout: float | None = 5.0, max_chars: int = 4096
) -> tuple[float, bool]:
    r"""math-verify equivalence of the answer: the ``<tag>`` content if present, else the response's ``\boxed{}``.

    Why: NeMo-RL's math environment grades ``\boxed{}`` answers of untagged responses (gold ``\boxed{gt}``,
    prediction parsed with ``ExprExtractionConfig`` + ``LatexExtractionConfig``); tagged answers grade like
    ``math_expr``. Untagged responses longer than ``max_chars`` are graded on their last ``max_chars`` characters.

    Example:
        >>> exact_answer("1/2", "so the result is \\boxed{0.5}")
        (1.0, True)
    """
    response = _text(response)
    answer = _content(response, tag)
    if answer is not None:
        if len(answer) > max_chars:
            return 0.0, False
        pred = boxed(answer)
    else:
        pred = response[-max_chars:]
        if "\\boxed" not in pred:
            pred = pred.strip()
        if not pred:
            return 0.0, False
    score = grade(boxed(_text(ground_truth)), pred, timeout=timeout)
    return score, score > 0.1


@register("exact_alnum", _builtin=True)
def exact_alnum(ground_truth: str, response: str, answer_tag: str = "answer") -> tuple[float, bool]:
    """1.0 when the ``<answer_tag>`` content equals the ground truth after dropping non-alphanumerics, any case.

    Why: NeMo-RL ``exact_answer_alphanumeric_reward`` for short exact answers ("B", "Paris", "42").

    Example:
        >>> exact_alnum("New York", "<answer> new-york! </answer>")
        (1.0, True)
    """
    answer = _content(_text(response), answer_tag)
    if answer is None:
        return 0.0, False
    if _alnum_lower(answer) == _alnum_lower(_text(ground_truth)):
        return 1.0, True
    return 0.0, False


@register("length_penalty", _builtin=True)
def length_penalty(
    ground_truth: str, response: str, max_length: int = 1024, buffer: int = 256, unit: str = "chars"
) -> tuple[float, None]:
    """DAPO's soft overlong penalty on the response length: 0 up to ``max_length - buffer``, then linear to -1.

    Why: discourages rambling without a token-level trainer change; lengths count characters or
    whitespace-separated words (``unit="words"``). Beyond ``max_length`` the penalty stays -1.

    Example:
        >>> length_penalty("", "x" * 900, max_length=1000, buffer=200)
        (-0.5, None)
    """
    problems = []
    if not isinstance(max_length, int) or max_length <= 0:
        problems.append(f"length_penalty: max_length must be a positive int, got {max_length!r}")
    if not isinstance(buffer, int) or not (0 < buffer <= (max_length if isinstance(max_length, int) else 0)):
        problems.append(f"length_penalty: buffer must be an int in (0, max_length], got {buffer!r}")
    if unit not in ("chars", "words"):
        problems.append(f"length_penalty: unit must be 'chars' or 'words', got {unit!r}")
    if problems:
        raise ConfigError(problems)
    response = _text(response)
    n = len(response) if unit == "chars" else len(response.split())
    free = max_length - buffer
    if n <= free:
        return 0.0, None
    return max(-1.0, (free - n) / buffer), None


_VERL_CLIP = 300  # verl's rule searches the solution's last 300 characters only


@register("verl_gsm8k", _builtin=True)
def verl_gsm8k(ground_truth: str, response: str) -> tuple[float, bool]:
    """verl's GSM8K rule (verl v0.7.0 ``verl/utils/reward_score/gsm8k.py``, ``method="strict"``): 1.0 when the last
    ``#### <number>`` in the response's final 300 characters equals the ground truth, else 0.0.

    Why: what a verl run on ``gsm8k`` scored its rollouts with (``default_compute_score`` for ``openai/gsm8k``), so
    re-scoring its dumps with it reproduces their ``score``; the evaluation job (``evals.vllm_generate``) scores with
    this function too.

    Example:
        >>> verl_gsm8k("72", "She sold 48 + 24 = 72 clips. #### 72")
        (1.0, True)
    """
    answer = gsm8k_answer(_text(response)[-_VERL_CLIP:])
    score = 1.0 if answer is not None and answer == _text(ground_truth) else 0.0
    return score, score > 0
