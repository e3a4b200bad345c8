"""Read NeMo-RL evaluation output: the score block `run_eval.py` prints, and `eval.save_path` files.

Why: the score is only printed to stdout (not saved), inside a job log full of other output, so it has to be
found and parsed robustly; per-sample results live in `evaluation_data.json` with Python reprs inside.

Example:
    >>> blocks = nbtools.evals.parse_score_blocks(job.logs())
    >>> blocks[-1].score, blocks[-1].numerator, blocks[-1].denominator
    (0.402, 201.0, 500)
"""

from __future__ import annotations

import ast
import decimal
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from nbtools._escape import html as _h
from nbtools.errors import ConfigError, Fix, NotFoundError

__all__ = ["ScoreBlock", "ScoreLog", "read_score_log", "parse_score_blocks", "load_evaluation_data", "load_eval_config", "REQUIRED_FIELDS"]

REQUIRED_FIELDS = (
    "model_name", "dataset_name", "max_new_tokens", "temperature", "top_p", "top_k", "seed",
    "metric", "num_tests_per_prompt", "score",
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_START = re.compile(r"(?<![\w.])model_name=")
_RULE = re.compile(r"^\s*(?:\([^)]*\)\s*)?={20,}\s*$")
_PAIR = re.compile(r"(?<![\w.])([a-z_]+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s()]+)")
_SCORE = re.compile(
    r"(?<![\w.])score=([-+0-9.eE]+|nan|inf)\s*\(\s*([-+0-9.eE]+)\s*/\s*(\d+)\s*\)"
)
_MAX_BLOCK_LINES = 12


@dataclass(frozen=True)
class ScoreBlock:
    """One printed NeMo-RL evaluation result (`_print_results` in nemo_rl/evals/eval.py).

    `numerator` may be fractional: with num_tests_per_prompt > 1 it is a sum of per-problem pass@k values.
    `max_new_tokens` is what NeMo-RL prints, i.e. `generation.vllm_cfg.max_model_len`.
    """

    model_name: str
    dataset_name: str
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    metric: str
    num_tests_per_prompt: int
    score: float
    numerator: float
    denominator: int
    line: int = 0  # 1-based line of the block's model_name line in the text

    @property
    def accuracy(self) -> float:
        """numerator / denominator (the unrounded score)."""
        return self.numerator / self.denominator if self.denominator else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready)."""
        return asdict(self)

    def problems(self, *, score_text: str | None = None) -> list[str]:
        """Why these numbers cannot come from a real evaluation (empty when they can).

        Args:
            score_text: the score as printed (``0.4020``), whose decimals set how closely it must match
                numerator / denominator; default: 4 decimals, as NeMo-RL prints it.

        Example:
            >>> ScoreBlock("m", "math500", 1024, 0.0, 1.0, -1, 0, "pass@1", 1, 1.5, 750, 500).problems()[0]
            'numerator 750 is larger than the denominator 500 (more problems solved than evaluated)'
        """
        out: list[str] = []
        num, den, score = self.numerator, self.denominator, self.score
        if den < 1:
            out.append(f"denominator {den} is not a number of problems (at least 1)")
        if not math.isfinite(num) or num < 0:
            out.append(f"numerator {num:g} is not a count of solved problems (>= 0)")
        elif den >= 1 and num > den:
            out.append(f"numerator {num:g} is larger than the denominator {den} (more problems solved than evaluated)")
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            out.append(f"score {score:g} is outside [0, 1]")
        elif den >= 1 and math.isfinite(num) and abs(score - num / den) > _tolerance(score_text):
            out.append(f"score {score:g} disagrees with its fraction {num:g}/{den} = {num / den:.6g}")
        if self.num_tests_per_prompt < 1:
            out.append(f"num_tests_per_prompt {self.num_tests_per_prompt} is below 1")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            out.append(f"temperature {self.temperature:g} is negative or not finite")
        if not (0.0 < self.top_p <= 1.0):
            out.append(f"top_p {self.top_p:g} is outside (0, 1]")
        return out

    def _repr_html_(self) -> str:
        return (
            f"<b>{_h(self.model_name)}</b> on <b>{_h(self.dataset_name)}</b>: {_h(self.metric)} = <b>{self.score:.4f}</b> "
            f"({self.numerator:g}/{self.denominator}), T={self.temperature}, n={self.num_tests_per_prompt}, "
            f"max_new_tokens={self.max_new_tokens}"
        )


def _tolerance(score_text: str | None) -> float:
    """Half a unit in the last printed decimal of the score (NeMo-RL prints 4), plus float slack."""
    decimals = 4
    if score_text:
        try:
            exp = decimal.Decimal(score_text.strip()).as_tuple().exponent
            decimals = max(0, -exp) if isinstance(exp, int) else 4
        except decimal.InvalidOperation:
            pass
    return 0.5 * 10.0 ** -decimals + 1e-9


@dataclass(frozen=True)
class ScoreLog:
    """Everything :func:`read_score_log` found: valid blocks, problems (by line), and a block still being written."""

    blocks: list[ScoreBlock]
    problems: list[str]
    pending_line: int | None = None  # 1-based line of a last block the log does not finish yet (a running job)


def _value(raw: str) -> Any:
    if raw[:1] in "'\"":
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return raw[1:-1]
    return raw


def _clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip("\r")


def _block_fields(lines: list[str], start: int) -> tuple[dict[str, Any], bool]:
    """The fields of the block starting at ``start``, and whether the log goes on after it (False: it ends inside)."""
    fields: dict[str, Any] = {}
    end = min(len(lines), start + _MAX_BLOCK_LINES)
    for j in range(start, end):
        line = lines[j]
        if j > start and (_RULE.match(line) or _START.search(line)):
            return fields, True
        m = _SCORE.search(line)
        if m:
            fields["score"], fields["numerator"], fields["denominator"] = m.group(1), m.group(2), m.group(3)
            line = line[: m.start()] + line[m.end():]
        for key, raw in _PAIR.findall(line):
            if key in REQUIRED_FIELDS and key not in fields:
                fields[key] = _value(raw)
    return fields, end < len(lines)


def _missing(fields: dict[str, Any]) -> list[str]:
    return [k for k in (*REQUIRED_FIELDS, "numerator", "denominator") if k not in fields]


def _convert(fields: dict[str, Any], index: int, line: int) -> ScoreBlock:
    missing = _missing(fields)
    if missing:
        raise NotFoundError(
            f"score block #{index + 1} (line {line}) has no {', '.join(repr(m + '=') for m in missing)} field; "
            f"found {sorted(fields)}. Expected NeMo-RL's run_eval.py block "
            f"(model_name=… dataset_name=… / max_new_tokens=… temperature=… top_p=… top_k=… seed=… / "
            f"metric=… num_tests_per_prompt=… / score=0.4020 (201/500))",
            fix=Fix("pass the complete job log (job.logs()); a truncated log means the eval job did not finish — "
                    "check job.status()", cli="pass the complete job log (`nbtools jobs logs EXPERIMENT.yaml --id ID` > eval.log); a truncated log means "
                    "the eval job did not finish — check `nbtools jobs status EXPERIMENT.yaml --id ID`"),
        )
    try:
        if int(fields["denominator"]) > 2**53:
            raise ValueError(f"denominator {fields['denominator']} is not a number of problems")
        return ScoreBlock(
            model_name=str(fields["model_name"]),
            dataset_name=str(fields["dataset_name"]),
            max_new_tokens=int(fields["max_new_tokens"]),
            temperature=float(fields["temperature"]),
            top_p=float(fields["top_p"]),
            top_k=int(float(fields["top_k"])),
            seed=int(fields["seed"]),
            metric=str(fields["metric"]),
            num_tests_per_prompt=int(fields["num_tests_per_prompt"]),
            score=float(fields["score"]),
            numerator=float(fields["numerator"]),
            denominator=int(fields["denominator"]),
            line=line,
        )
    except (ValueError, OverflowError) as exc:
        raise NotFoundError(
            f"score block #{index + 1} (line {line}) has a malformed value: {exc}; fields {fields}",
            fix="pass the raw job log; the block must be printed by NeMo-RL's run_eval.py unchanged",
        ) from exc


def read_score_log(text: str) -> ScoreLog:
    """Every score block of a log, with what is wrong with the others, for logs that are still being written.

    A last block that the text ends inside (the job is printing it now) is not a problem: it is reported as
    ``pending_line`` and the complete blocks before it are kept. A block with a missing or malformed field, or with
    impossible numbers (``score=1.5000 (750/500)``, a score that disagrees with its fraction), is listed in
    ``problems`` by line and left out of ``blocks``.

    Example:
        >>> log = nbtools.evals.read_score_log(job.logs())
        >>> log.blocks[-1].score, log.problems, log.pending_line
        (0.402, [], None)
    """
    lines = [_clean(x) for x in text.splitlines()]
    blocks: list[ScoreBlock] = []
    problems: list[str] = []
    pending = None
    starts = [i for i, ln in enumerate(lines) if _START.search(ln) and "dataset_name=" in ln]
    for n, i in enumerate(starts):
        fields, closed = _block_fields(lines, i)
        if n == len(starts) - 1 and not closed and _missing(fields):
            pending = i + 1  # the job is printing this block right now
            continue
        try:
            block = _convert(fields, n, i + 1)
        except NotFoundError as e:
            problems.append(str(e).split("\n")[0])
            continue
        bad = block.problems(score_text=str(fields["score"]))
        if bad:
            problems.append(f"score block #{n + 1} (line {i + 1}, {block.model_name} on {block.dataset_name}) is "
                            f"impossible: {'; '.join(bad)}")
        else:
            blocks.append(block)
    return ScoreLog(blocks, problems, pending)


def parse_score_blocks(text: str, *, strict: bool = True) -> list[ScoreBlock]:
    """Every valid score block in a log, in order (a log may hold several evaluations and unrelated output).

    Args:
        text: job log or stdout (ANSI colours and Ray's `(pid=…)` prefixes are tolerated).
        strict: raise on an incomplete or impossible block (naming the field or the numbers); False skips it.
            A last block that is still being written is skipped either way (see :func:`read_score_log`).

    Returns:
        list of ScoreBlock (possibly empty when the log has no complete block yet).

    Raises:
        NotFoundError: a block is missing a field (strict), naming the field.
        ConfigError: a block's numbers are impossible (strict), listing every such block.

    Example:
        >>> [b.score for b in parse_score_blocks(job.logs())]
        [0.402, 0.464]
    """
    lines = [_clean(x) for x in text.splitlines()]
    starts = [i for i, ln in enumerate(lines) if _START.search(ln) and "dataset_name=" in ln]
    log = read_score_log(text)
    if strict:
        for n, i in enumerate(starts):  # a missing or malformed field: NotFoundError naming it, with its fix
            fields, _ = _block_fields(lines, i)
            if i + 1 != log.pending_line:
                _convert(fields, n, i + 1)
        if log.problems:
            raise ConfigError([*log.problems, "fix: pass the raw log printed by NeMo-RL's run_eval.py; numbers like "
                               "these mean the log was edited or two outputs were interleaved"])
    return log.blocks


def load_eval_config(save_path: str | Path) -> dict[str, Any]:
    """`<save_path>/config.json` written by run_eval.py (model_name, dataset_name, metric, k_value, ...).

    Example:
        >>> load_eval_config("/data/eval/math500_base")["num_tests_per_prompt"]
        1
    """
    p = _file_in(save_path, "config.json")
    if p is None:
        raise NotFoundError(
            f"expected NeMo-RL's eval config.json at {save_path}, found nothing",
            fix="set eval.save_path when running run_eval.py and pass that directory (a path or its gs:// URL)",
        )
    return json.loads(p.read_text())


def _file_in(path: str | Path, name: str) -> Path | None:
    """A local copy of ``path`` (a file) or of ``path/name`` (a directory), on any storage; None when absent."""
    from nbtools import storage

    found = storage.info(path)
    if found is not None and found.is_dir:
        path = storage.join(path, name)
        found = storage.info(path)
    return storage.fetch(path, entry=found) if found is not None and not found.is_dir else None


def _literal(s: Any) -> Any:
    if not isinstance(s, str):
        return s
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def load_evaluation_data(path: str | Path, *, num_tests_per_prompt: int | None = None) -> pd.DataFrame:
    """`evaluation_data.json` → one row per sample, with problem ids recovered.

    NeMo-RL repeats each prompt `num_tests_per_prompt` times consecutively, so problem = sample_index // n.
    `extra_env_info` (a Python repr) is parsed; its dict keys (e.g. ground_truth, level, subject) become columns.

    Args:
        path: the file, or the save_path directory holding it (and config.json).
        num_tests_per_prompt: samples per problem; read from config.json next to it when omitted.

    Returns:
        DataFrame: problem_id, sample, sample_index, prompt, response, reward, correct, plus extra_env_info keys.

    Example:
        >>> df = load_evaluation_data("/data/eval/math500_base")
        >>> df.groupby("problem_id").correct.mean().mean()
    """
    from nbtools import storage

    f = _file_in(path, "evaluation_data.json")
    if f is None:
        raise NotFoundError(
            f"expected evaluation_data.json at {path}, found nothing",
            fix="run run_eval.py with eval.save_path=<dir> (v0.4+) and pass that dir",
        )
    payload = json.loads(f.read_text())
    rows = payload.get("evaluation_data") if isinstance(payload, dict) else None
    if not isinstance(rows, list):
        raise NotFoundError(
            f"{path} has no top-level 'evaluation_data' list (keys: {list(payload)[:10] if isinstance(payload, dict) else type(payload).__name__})",
            fix="pass the evaluation_data.json written by NeMo-RL's run_eval.py",
        )
    if num_tests_per_prompt is None:  # config.json beside it (run_eval.py writes both into eval.save_path)
        text = str(path).rstrip("/") or "/"
        found = storage.info(text)
        save_dir = text if found is not None and found.is_dir else storage.parent_of(text)
        cfg_file = _file_in(storage.join(save_dir, "config.json"), "config.json")
        num_tests_per_prompt = int(json.loads(cfg_file.read_text()).get("num_tests_per_prompt", 1)) if cfg_file else 1
    df = pd.DataFrame(rows)
    for col in ("prompt", "response", "reward"):
        if col not in df.columns and len(df):
            raise NotFoundError(f"{path}: samples have no {col!r} field (columns: {list(df.columns)})",
                                fix="pass the evaluation_data.json written by NeMo-RL's run_eval.py")
    if df.empty:
        return pd.DataFrame(columns=["problem_id", "sample", "sample_index", "prompt", "response", "reward", "correct"])
    if "sample_index" not in df.columns:
        df["sample_index"] = range(len(df))
    df["sample_index"] = df["sample_index"].astype(int)
    n = max(1, int(num_tests_per_prompt))
    df.insert(0, "problem_id", (df["sample_index"] // n).astype(str))
    df.insert(1, "sample", df["sample_index"] % n)
    df["reward"] = df["reward"].astype(float)
    df["correct"] = df["reward"] >= 1.0 - 1e-9
    if "extra_env_info" in df.columns:
        infos = df["extra_env_info"].map(_literal)
        extra = pd.DataFrame([i if isinstance(i, dict) else {} for i in infos], index=df.index)
        for col in extra.columns:
            if col not in df.columns and extra[col].map(lambda v: isinstance(v, (str, int, float, bool)) or v is None).all():
                df[col] = extra[col]
    return df
