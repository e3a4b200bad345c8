"""Local evaluation: batched generation with `transformers`, graded by the training reward functions.

Why: the same grader as training (nbtools.rewards / math-verify) and one per-problem table, so a local
rehearsal model and a cluster model are compared with the same statistics.

Example:
    >>> res = nbtools.evals.evaluate_local(cfg.run_dir / "merged_hf", problems, reward="exact_alnum")
    >>> res.accuracy
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from nbtools.errors import ConfigError, NotFoundError
from nbtools.evals.result import EvalResult

__all__ = ["evaluate_local", "problems_frame", "resolve_reward", "text_generation"]

RewardLike = str | list | tuple | Callable[..., tuple[float, Any]] | None


def problems_frame(problems: Any) -> pd.DataFrame:
    """Normalise problems (rehearsal `Problem`s, dicts, or a DataFrame) to columns problem_id, prompt, ground_truth, ...

    Extra per-problem fields (e.g. MATH-500's `level`, `subject`) are kept for breakdowns.

    Example:
        >>> problems_frame(nbtools.rehearsal.task.held_out_problems(cfg)).columns[:3].tolist()
        ['problem_id', 'prompt', 'ground_truth']
    """
    if isinstance(problems, pd.DataFrame):
        df = problems.copy()
    else:
        rows = []
        for p in problems:
            if dataclasses.is_dataclass(p) and not isinstance(p, type):
                rows.append(dataclasses.asdict(p))
            elif isinstance(p, dict):
                rows.append(dict(p))
            else:
                rows.append({k: getattr(p, k) for k in ("id", "prompt", "ground_truth") if hasattr(p, k)})
        df = pd.DataFrame(rows)
    if "problem_id" not in df.columns and "id" in df.columns:
        df = df.rename(columns={"id": "problem_id"})
    if "problem_id" not in df.columns:
        df.insert(0, "problem_id", [str(i) for i in range(len(df))])
    missing = [c for c in ("prompt", "ground_truth") if c not in df.columns]
    if missing or df.empty:
        raise ConfigError(
            f"problems need fields problem_id/id, prompt, ground_truth and at least one row; "
            f"missing {missing}, got {len(df)} row(s) with columns {list(df.columns)}"
        )
    df["problem_id"] = df["problem_id"].astype(str)
    if df["problem_id"].duplicated().any():
        dup = df.loc[df["problem_id"].duplicated(), "problem_id"].iloc[0]
        raise ConfigError(f"problem ids must be unique; {dup!r} appears more than once")
    front = ["problem_id", "prompt", "ground_truth"]
    return df[front + [c for c in df.columns if c not in front]].reset_index(drop=True)


def resolve_reward(reward: RewardLike) -> tuple[Callable[..., tuple[float, Any]], str]:
    """A reward fn and a stable label: None → `exact_answer`; a name → `rewards.get`; a spec list → `rewards.combine`.

    Example:
        >>> fn, label = resolve_reward(cfg.rehearsal.reward_functions)
    """
    from nbtools import rewards

    if reward is None:
        reward = "exact_answer"
    if isinstance(reward, str):
        return rewards.get(reward), reward
    if isinstance(reward, (list, tuple)):
        spec = [dict(x) for x in reward]
        return rewards.combine(spec), json.dumps(spec, sort_keys=True, default=str)
    if callable(reward):
        return reward, getattr(reward, "__qualname__", type(reward).__name__)
    raise ConfigError(f"reward must be None, a registered name, a NeMo-RL spec list or a callable; got {reward!r}")


def _fingerprint(model_dir: Path, problems: pd.DataFrame, params: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for f in sorted(model_dir.rglob("*")):
        if f.is_file():
            st = f.stat()
            h.update(f"{f.relative_to(model_dir)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    h.update(pd.util.hash_pandas_object(problems[["problem_id", "prompt", "ground_truth"]], index=False).values.tobytes())
    h.update(json.dumps(params, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def text_generation(model: str | os.PathLike):
    """A ``transformers`` text-generation pipeline of a HuggingFace model dir (e.g. notebook 06's merge).

    A bucket URL is copied here first (``nbtools.storage.mirror``: a real model is GBs; loading through a FUSE
    mount crawls). The model loads the way the evaluation loads it (left padding, on the GPU when there is one)
    and with transformers' progress bar off: an executed notebook saves that bar as a widget stuck at
    "Loading weights: 0%".

    Example:
        >>> generate = nbtools.evals.text_generation(merged.url)
        >>> generate(prompt, max_new_tokens=16, do_sample=False, return_full_text=False)
    """
    from transformers import pipeline

    from nbtools import storage

    tok, lm, _ = _load_model(Path(storage.mirror(str(model))))
    return pipeline("text-generation", model=lm, tokenizer=tok)


def _load_model(model_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (model_dir / "config.json").is_file():
        raise NotFoundError(
            f"expected a HuggingFace model dir (config.json + weights) at {model_dir}, found "
            f"{sorted(p.name for p in model_dir.iterdir())[:10] if model_dir.is_dir() else 'nothing'}",
            fix="merge a checkpoint first (notebook 06 / nbtools.checkpoints.merge) or pass the right directory",
        )
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise ConfigError(f"tokenizer at {model_dir} has neither a pad nor an eos token; batched generation needs one")
        tok.pad_token = tok.eos_token
    device = "cuda" if torch.cuda.is_available() else "cpu"
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # its "Loading weights" widget is saved as "0%" in an executed notebook
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32 if device == "cpu" else "auto")
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
    return tok, model.to(device).eval(), device


def _decode(tok, ids, eos_ids: set[int]) -> str:
    ids = list(ids)
    for i, t in enumerate(ids):
        if t in eos_ids:
            ids = ids[:i]
            break
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()


def _generate(tok, model, device, prompts: list[str], *, n: int, temperature: float, top_p: float, top_k: int,
              max_new_tokens: int, batch_size: int, seed: int, add_special_tokens: bool, desc: str) -> list[list[str]]:
    import torch
    from transformers import GenerationConfig

    from nbtools._progress import tqdm

    eos = model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None else tok.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
    sampling = temperature > 0
    gen_cfg = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sampling, num_return_sequences=n,
        pad_token_id=tok.pad_token_id, eos_token_id=sorted(eos_ids) or None,
        **({"temperature": temperature, "top_p": top_p, "top_k": top_k if top_k > 0 else 0} if sampling else {}),
    )
    per_batch = max(1, batch_size // n)
    out: list[list[str]] = []
    with tqdm(total=len(prompts), desc=desc, unit="problem") as bar:
        for b, start in enumerate(range(0, len(prompts), per_batch)):
            chunk = prompts[start : start + per_batch]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens).to(device)
            torch.manual_seed(seed + b)
            with torch.inference_mode():
                seqs = model.generate(**enc, generation_config=gen_cfg)
            new = seqs[:, enc["input_ids"].shape[1] :].tolist()
            texts = [_decode(tok, row, eos_ids) for row in new]
            out.extend(texts[i * n : (i + 1) * n] for i in range(len(chunk)))
            bar.update(len(chunk))
    return out


def evaluate_local(
    model_dir: str | os.PathLike,
    problems: Iterable[Any] | pd.DataFrame,
    *,
    reward: RewardLike = None,
    n: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = -1,
    batch_size: int = 64,
    max_new_tokens: int = 256,
    seed: int = 0,
    add_special_tokens: bool = False,
    out_dir: str | os.PathLike | None = None,
    progress_desc: str | None = None,
) -> EvalResult:
    """Generate `n` responses per problem with a small HF model and grade them with nbtools.rewards.

    Greedy when `temperature == 0` (then n must be 1); sampled otherwise (NeMo-RL's defaults: top_p 1, top_k
    disabled). Prompts are used exactly as given (already chat-templated), left-padded and batched.
    With `out_dir`, results are saved there atomically and a re-run with the same model files, problems and
    settings loads them instead of generating again.

    Args:
        model_dir: HuggingFace model directory (config.json, weights, tokenizer).
        problems: rehearsal `Problem`s, dicts or a DataFrame with (id|problem_id), prompt, ground_truth.
        reward: grader: None (`exact_answer`), a registered name, a NeMo-RL `[{name, weight, kwargs}]` spec, or
            a callable `(ground_truth, response) -> (reward, is_correct | None)`.
        n: samples per problem.
        temperature: 0 for greedy.
        top_p: nucleus sampling (sampled only).
        top_k: -1 disables (sampled only).
        batch_size: sequences per forward pass.
        max_new_tokens: generation budget.
        seed: sampling seed (per batch: seed + batch index).
        add_special_tokens: let the tokenizer add BOS etc. (False: the prompt is already templated).
        out_dir: save/reuse results here.
        progress_desc: progress bar label.

    Returns:
        EvalResult whose table has problem_id, sample, prompt, response, extracted_answer, correct, reward,
        ground_truth and the problems' extra fields. `correct` is the grader's flag, or reward >= 1 when it
        returns None.

    Raises:
        NotFoundError: model_dir is not a HF model directory.
        ConfigError: bad problems, reward or sampling settings.

    Example:
        >>> base = evaluate_local(nbtools.rehearsal.task.baseline_dir(cfg), problems, reward="exact_alnum")
        >>> sampled = evaluate_local(model_dir, problems, n=8, temperature=1.0)
    """
    from nbtools import rewards

    model_path = Path(model_dir).expanduser().resolve()
    errors = []
    if n < 1:
        errors.append(f"n must be >= 1, got {n}")
    if temperature < 0:
        errors.append(f"temperature must be >= 0, got {temperature}")
    if temperature == 0 and n > 1:
        errors.append(f"greedy decoding (temperature=0) with n={n} repeats one answer; set temperature > 0 for n > 1")
    if batch_size < 1 or max_new_tokens < 1:
        errors.append(f"batch_size and max_new_tokens must be >= 1, got {batch_size}, {max_new_tokens}")
    if errors:
        raise ConfigError(errors)
    frame = problems_frame(problems)
    fn, reward_label = resolve_reward(reward)
    params = {
        "n": n, "temperature": temperature, "top_p": top_p, "top_k": top_k, "max_new_tokens": max_new_tokens,
        "seed": seed, "batch_size": batch_size, "reward": reward_label, "add_special_tokens": add_special_tokens,
    }
    if not (model_path / "config.json").is_file():
        _load_model(model_path)  # raises the NotFoundError with the fix
    fingerprint = _fingerprint(model_path, frame, params)
    if out_dir is not None:
        cached = Path(out_dir) / "summary.json"
        if cached.is_file() and json.loads(cached.read_text()).get("params", {}).get("fingerprint") == fingerprint:
            return EvalResult.load(out_dir)

    tok, model, device = _load_model(model_path)
    desc = progress_desc or f"eval {model_path.name} ({'greedy' if temperature == 0 else f'T={temperature}, n={n}'})"
    responses = _generate(
        tok, model, device, frame["prompt"].tolist(), n=n, temperature=temperature, top_p=top_p, top_k=top_k,
        max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed, add_special_tokens=add_special_tokens,
        desc=desc,
    )
    rows = []
    extras = [c for c in frame.columns if c not in ("problem_id", "prompt", "ground_truth")]
    for rec, samples in zip(frame.to_dict("records"), responses, strict=True):
        for s, resp in enumerate(samples):
            r, ok = fn(rec["ground_truth"], resp)
            rows.append({
                "problem_id": rec["problem_id"], "sample": s, "prompt": rec["prompt"], "response": resp,
                "extracted_answer": rewards.extract_answer(resp), "correct": bool(ok) if ok is not None else float(r) >= 1.0 - 1e-9,
                "reward": float(r), "ground_truth": rec["ground_truth"], **{k: rec[k] for k in extras},
            })
    result = EvalResult(table=pd.DataFrame(rows), model=str(model_path), params={**params, "fingerprint": fingerprint})
    if out_dir is not None:
        result.save(out_dir)
    return result
