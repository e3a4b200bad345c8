"""Write a realistic NeMo-RL GRPO run (``exp_NNN`` with ``train_data_step{N}.jsonl``) fast, at any size.

Why: the trajectory reader is benchmarked on a ~1 GB run shaped like NeMo-RL's own dumps (records of ~38 KB
carrying ~900-token ``token_ids`` / ``token_loss_mask`` / ``advantages`` / two logprob arrays), and tests need
the same shape at a few KB. Records follow ``Logger.log_batched_dict_as_jsonl``: every field is a length-1
slice of the batch (``"rewards": [1.0]``, ``"content": [[prompt, response, env]]``), keys in NeMo-RL's order,
``json.dumps`` separators (``", "`` / ``": "``), right-padded arrays, advantages broadcast over every token.
Lines are assembled from byte templates (no per-number formatting), so 1 GB takes a few seconds.

Example:
    $ python benchmarks/gen_nemo_rl_run.py /tmp/bench-run --steps 410 --records 64      # ~1 GB
    >>> from gen_nemo_rl_run import generate
    $ python benchmarks/gen_nemo_rl_run.py /tmp/tiny --tiny                                # 2 steps x 4 records
    >>> generate("/tmp/tiny", steps=3, records=8, seq_len=64)   # tests: a few KB
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["generate", "main", "WORDS"]

WORDS = (
    "first compare the numbers then keep the largest value so the answer is clearly the maximum of the three "
    "digits we check each one carefully because a wrong comparison changes the result and the reward"
).split()
PAD_ID = 151643


def _pool(items: list[bytes]) -> tuple[bytes, np.ndarray]:
    """Join items with ", " and return (bytes, start offset of every item, plus the end sentinel)."""
    data = b", ".join(items)
    lens = np.fromiter((len(x) + 2 for x in items), dtype=np.int64, count=len(items))
    starts = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    return data, starts


def _take(pool: tuple[bytes, np.ndarray], a: int, n: int) -> bytes:
    data, starts = pool
    return data[starts[a] : starts[a + n] - 2]


def _rep(item: bytes, n: int) -> bytes:
    return b", ".join([item] * n) if n < 4 else (item + b", ") * (n - 1) + item


def _join(*parts: bytes) -> bytes:
    return b", ".join(p for p in parts if p)


def _text(rng: np.random.Generator, n_words: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n_words))


def _problem(rng: np.random.Generator, prompt_words: int) -> tuple[str, str]:
    digits = rng.integers(0, 10, 3)
    prompt = (
        "<|im_start|>system\nYou are a helpful assistant. Think step by step inside <think></think> and put the final "
        f"answer inside <answer></answer>.<|im_end|>\n<|im_start|>user\nWhat is the largest of {digits[0]}, {digits[1]} "
        f"and {digits[2]}? Context: {_text(rng, prompt_words)}<|im_end|>\n<|im_start|>assistant\n"
    )
    return prompt, str(int(digits.max()))


def _response(rng: np.random.Generator, truth: str, gen_words: int) -> tuple[str, float, str]:
    kind = rng.random()
    answer = truth if kind < 0.55 else str(int(rng.integers(0, 10)))
    if kind > 0.9:  # no tags: format reward 0
        return _text(rng, gen_words) + f" so {answer}", 0.0, "Environment: incorrect"
    text = f"<think> {_text(rng, gen_words)} </think> <answer> {answer} </answer>"
    ok = answer == truth
    return text, (1.0 if ok else 0.2), "Environment: correct" if ok else "Environment: incorrect"


def _float_items(rng: np.random.Generator, n: int, full_repr: bool) -> list[bytes]:
    vals = -rng.gamma(0.4, 0.6, n).astype(np.float32)
    if full_repr:
        return [repr(float(v)).encode() for v in vals]
    return [repr(round(float(v), 7)).encode() for v in vals]


def generate(
    out: str | os.PathLike,
    *,
    steps: int = 410,
    records: int = 64,
    seq_len: int = 900,
    group_size: int = 8,
    schema: str = "v0.6",
    exp: str = "exp_001",
    val_every: int = 0,
    full_repr: bool = False,
    seed: int = 1234,
    skip_steps: tuple[int, ...] = (),
    tensorboard: bool = False,
) -> Path:
    """Write ``<out>/<exp>/train_data_step{1..steps}.jsonl`` (+ val dumps, + TensorBoard) and return the exp dir.

    Args:
        out: the log_dir (NeMo-RL ``logger.log_dir``); created if missing.
        steps: number of training steps (1-indexed, as NeMo-RL numbers them).
        records: lines per step file (num_prompts_per_step × num_generations_per_prompt).
        seq_len: padded length of every per-token array (≈ tokens per record).
        group_size: generations per prompt (records of one group share the prompt).
        schema: "v0.6" (HEAD: token_ids, token_loss_mask, advantages, ...) or "v0.5" (no mask, no advantages).
        exp: experiment dir name.
        val_every: write ``val_data_step{N}.jsonl`` (v0.6 chat messages) every N steps (0: never).
        full_repr: float32 full repr (real NeMo-RL, 1.5× bigger) instead of 7 decimals (the baseline's files).
        seed: RNG seed; the same arguments give the same bytes.
        skip_steps: step numbers to leave out (gaps).
        tensorboard: also write train/* scalars with torch's SummaryWriter.
    """
    rng = np.random.default_rng(seed)
    exp_dir = Path(out) / exp
    exp_dir.mkdir(parents=True, exist_ok=True)
    n_pool = 8 * seq_len
    ids_pool = _pool([str(int(x)).encode() for x in rng.integers(100, 150000, n_pool)])
    lp_pool = _pool(_float_items(rng, n_pool, full_repr))
    lp2_pool = _pool(_float_items(rng, n_pool, full_repr))
    zero_f, one, zero = b"0.0", b"1", b"0"
    pad = str(PAD_ID).encode()
    tb_rows: list[tuple[int, float, float]] = []
    for step in range(1, steps + 1):
        if step in skip_steps:
            continue
        lines: list[bytes] = []
        rewards_step, gens = [], []
        n_groups = max(1, records // group_size)
        groups = [_problem(rng, int(rng.integers(30, 120))) for _ in range(n_groups)]
        for g in range(n_groups):
            prompt, truth = groups[g]
            members = [_response(rng, truth, int(rng.integers(60, 420))) for _ in range(group_size)]
            rw = np.array([m[1] for m in members])
            adv = (rw - rw.mean()) / (rw.std() + 1e-6)
            for j, (resp, reward, env) in enumerate(members):
                i = g * group_size + j
                if i >= records:
                    break
                p_tok = min(seq_len // 4, 40 + len(prompt) // 5)
                e_tok = 6
                room = seq_len - p_tok - e_tok
                g_tok = max(1, min(room, int(room * (0.15 + 0.85 * len(resp) / 3000)) + int(rng.integers(0, 8))))
                used = p_tok + g_tok + e_tok
                n_pad = seq_len - used
                a = int(rng.integers(0, n_pool - seq_len))
                content = json.dumps([[prompt, resp, env]]).encode()
                head = b'{"content": ' + content + b', "rewards": [' + repr(float(reward)).encode() + b"]"
                head += b', "input_lengths": [' + str(used).encode() + b"]"
                if schema == "v0.5":
                    line = head + b', "generation_logprobs": [[' + _join(
                        _rep(zero_f, p_tok), _take(lp_pool, a, g_tok), _rep(zero_f, e_tok + n_pad)
                    ) + b']], "prev_logprobs": [[' + _take(lp2_pool, a, seq_len) + b"]]"
                else:
                    adv_b = repr(float(np.float32(adv[j])) if full_repr else round(float(adv[j]), 7)).encode()
                    line = (
                        head
                        + b', "token_ids": [['
                        + _join(_take(ids_pool, a, used), _rep(pad, n_pad))
                        + b']], "token_loss_mask": [['
                        + _join(_rep(zero, p_tok), _rep(one, g_tok), _rep(zero, e_tok + n_pad))
                        + b']], "sample_loss_mask": [1.0], "advantages": [['
                        + _join(_rep(adv_b, used), _rep(zero_f, n_pad))
                        + b']], "generation_logprobs": [['
                        + _join(_rep(zero_f, p_tok), _take(lp_pool, a, g_tok), _rep(zero_f, e_tok + n_pad))
                        + b']], "prev_logprobs": [['
                        + _take(lp2_pool, a, seq_len)
                        + b"]]"
                    )
                lines.append(line + b', "idx": ' + str(i).encode() + b"}\n")
                rewards_step.append(reward)
                gens.append(g_tok)
        _atomic_write(exp_dir / f"train_data_step{step}.jsonl", b"".join(lines))
        tb_rows.append((step, float(np.mean(rewards_step)), float(np.mean(gens))))
        if val_every and schema != "v0.5" and (step % val_every == 0 or step == 1):
            vstep = 0 if step == 1 else step
            vlines = []
            for i in range(min(records, 16)):
                prompt, truth = _problem(rng, 20)
                resp, reward, env = _response(rng, truth, 40)
                msgs = [{"role": "user", "content": prompt}, {"role": "assistant", "content": resp},
                        {"role": "environment", "content": env}]
                vlines.append(json.dumps({"content": [msgs], "rewards": [reward], "idx": i}) + "\n")
            _atomic_write(exp_dir / f"val_data_step{vstep}.jsonl", "".join(vlines).encode())
    if tensorboard:
        _write_tensorboard(exp_dir / "tensorboard", tb_rows)
    return exp_dir


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write_tensorboard(tb_dir: Path, rows: list[tuple[int, float, float]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(tb_dir))
    try:
        for step, reward, gen in rows:
            w.add_scalar("train/reward", reward, step)
            w.add_scalar("train/mean_gen_tokens_per_sample", gen, step)
            w.add_scalar("train/kl_penalty", 0.001 * step ** 0.5, step)
            w.add_scalar("timing/train/total_step_time", 2.0 + 0.01 * (step % 7), step)
            if step % 10 == 0:
                w.add_scalar("validation/accuracy", min(1.0, reward + 0.1), step)
    finally:
        w.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="log_dir to write (exp_001 is created inside)")
    ap.add_argument("--steps", type=int, default=410)
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=900)
    ap.add_argument("--schema", choices=["v0.5", "v0.6"], default="v0.6")
    ap.add_argument("--full-repr", action="store_true")
    ap.add_argument("--val-every", type=int, default=0)
    ap.add_argument("--tensorboard", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tiny", action="store_true", help="2 steps x 4 records of 32 tokens, validation every step "
                    "(a few KB; tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    if a.tiny:
        a.steps, a.records, a.seq_len, a.val_every = 2, 4, 32, 1
    t0 = time.perf_counter()
    exp = generate(a.out, steps=a.steps, records=a.records, seq_len=a.seq_len, schema=a.schema,
                   full_repr=a.full_repr, val_every=a.val_every, tensorboard=a.tensorboard, seed=a.seed)
    files = list(exp.glob("train_data_step*.jsonl"))
    size = sum(f.stat().st_size for f in files)
    n = a.steps * a.records
    print(f"wrote {exp}: {len(files)} files, {n} records, {size:,} bytes ({size / n:,.0f} B/record) "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
