"""The GRPO pieces, as NeMo-RL computes them: warm start, rollouts, rewards, clipped surrogate + k3 KL loss.

Kept free of I/O so the trainer loop (``trainer.py``) reads as the recipe: generate → reward → advantages →
reference logprobs → one clipped-PG update → log/validate/checkpoint.
"""

from __future__ import annotations

import functools
import math
import random
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from nbtools.rehearsal._sampling import Engine
from nbtools.rehearsal.model import ENV_CORRECT, ENV_INCORRECT, VOCAB
from nbtools.rehearsal.task import Problem, format_prompt, format_response

__all__ = ["Rollout", "answer_prior", "warm_start", "rollout", "token_logprobs", "grpo_loss", "clip_grad_norm_", "lr_factor", "PromptSampler"]

_IDS = {w: i for i, w in enumerate(VOCAB)}
EOS, PAD = _IDS["<eos>"], _IDS["<pad>"]
_DIGITS = [_IDS[str(d)] for d in range(10)]
PREFERRED_ANSWER, PREFERRED_SHARE = 5, 0.14  # the warm start's answer prior (see answer_prior)
KL_INPUT_CLAMP, KL_OUTPUT_CLAMP = 20.0, 10.0


def encode(text: str) -> list[int]:
    """Whitespace word-level encoding, identical to the saved ``tokenizer.json`` (checked in the tests)."""
    return list(_encode(text))


@functools.lru_cache(maxsize=65536)
def _encode(text: str) -> tuple[int, ...]:  # prompts, observations and most responses repeat across steps
    return tuple(_IDS.get(w, _IDS["<unk>"]) for w in text.split())


def decode(ids) -> str:
    return " ".join(VOCAB[i] for i in ids)


def think_for(digits: tuple[int, ...], style: str = "copy") -> str:
    """The warm-start scratchpad: the digits (``copy``) or their running maximum (``running_max``)."""
    if style == "running_max":
        return " ".join(str(max(digits[: i + 1])) for i in range(len(digits)))
    return " ".join(map(str, digits))


def answer_prior() -> torch.Tensor:
    """The warm start's target distribution of the answer digit, ``[10]``: uniform, with ``PREFERRED_ANSWER`` raised to
    ``PREFERRED_SHARE``.

    Why not exactly uniform: the argmax of a nearly uniform answer distribution leans towards the scratchpad's last
    digit (copying is what a small transformer does first), so the untrained policy's greedy accuracy was 0.40-0.52
    while its sampled accuracy sat at chance. One slightly preferred digit makes the greedy answer the same for every
    problem (uninformative by construction): greedy accuracy is the share of problems whose answer is that digit
    (5: 9.1% of all triples, about chance), sampled accuracy stays at chance (0.1).
    """
    q = torch.full((10,), (1.0 - PREFERRED_SHARE) / 9)
    q[PREFERRED_ANSWER] = PREFERRED_SHARE
    return q


def warm_start(model: torch.nn.Module, problems: list[Problem], *, steps: int, lr: float, batch: int, seed: int,
               think: str = "copy", rank: int = 0, world: int = 1, balanced: bool = True, decay: bool = True) -> float:
    """Short SFT that teaches the response format with uninformative answers (the think is a scratchpad over the
    digits; the answer's target is :func:`answer_prior`, the same for every problem), so RL must earn correctness.
    Returns the final loss.

    Every other response token is a hard label; the answer token fed as input is a balanced random digit (``balanced``)
    so that what follows it is learned for every digit. With ``world > 1`` (a process group is up) it is
    data-parallel: every rank draws the same batch, trains on its rows ``rank::world`` and averages gradients with one
    all-reduce, so the ranks stay identical at half the cost.
    """
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0, fused=True)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    loss = torch.tensor(0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: lr_factor(k, warmup=0, decay="cosine", total=steps,
                                                                      min_ratio=0.1) if decay else 1.0)
    prior = torch.zeros(len(VOCAB))
    prior[_DIGITS] = answer_prior()
    at = encode(format_response(think_for((0, 0, 0), think), "0")).index(_IDS["<answer>"]) + 1  # answer's offset
    for _ in range(steps):
        rows, plen = [], 0
        picked = rng.choices(problems, k=batch)
        if balanced:
            answers = list(range(10)) * (batch // 10) + [rng.randrange(10) for _ in range(batch % 10)]
            rng.shuffle(answers)
        else:
            answers = [rng.randrange(10) for _ in range(batch)]
        for p, a in zip(picked, answers, strict=True):
            d = p.digits
            prompt = encode(format_prompt(d))
            resp = encode(format_response(think_for(d, think), str(a))) + [EOS]
            rows.append(prompt + resp)
            plen = len(prompt)
        ids = torch.tensor(rows[rank::world])
        logits = model(input_ids=ids).logits[:, plen - 1 : -1].float()
        target = torch.nn.functional.one_hot(ids[:, plen:], logits.shape[-1]).float()
        target[:, at, :] = prior  # the answer token: the same distribution for every problem
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1, logits.shape[-1]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            _all_reduce_mean([p.grad for p in params], world)
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        sched.step()
    if world > 1:
        loss = loss.detach().clone()
        torch.distributed.all_reduce(loss)
        loss /= world
    return float(loss.detach())


def _all_reduce_mean(tensors: list[torch.Tensor], world: int) -> None:
    """Average same-shaped tensors over ranks with a single all-reduce of one flat buffer."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    torch.distributed.all_reduce(flat)
    flat /= world
    torch._foreach_copy_(tensors, [c.view_as(t) for c, t in zip(flat.split([t.numel() for t in tensors]), tensors,
                                                                   strict=True)])


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float) -> float:
    """Clip FSDP2 (DTensor ``Shard(0)``) gradients by their global norm: local sum of squares, one all-reduce, scale.

    What NeMo-RL's DTensor worker does (``get_grad_norm`` + ``clip_grad_by_total_norm_``); equal to
    ``torch.nn.utils.clip_grad_norm_`` on the DTensors, without one DTensor dispatch per parameter. Returns the norm.
    """
    local = [g.to_local() if hasattr(g, "to_local") else g for g in (p.grad for p in params) if g is not None]
    sq = torch.stack(torch._foreach_norm(local)).pow(2).sum() if local else torch.zeros(())
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(sq)
    total = sq.sqrt()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(local, coef)
    return float(total)


def lr_factor(step: int, *, warmup: int, decay: str, total: int, min_ratio: float, start: float = 0.1) -> float:
    """Learning-rate multiplier after ``step`` optimizer steps: NeMo-RL's LinearLR warmup (``start`` → 1 over
    ``warmup``; its configs use 0.1), then constant, or cosine down to ``min_ratio`` at ``total`` (LinearLR +
    CosineAnnealingLR in a SequentialLR).

    Example:
        >>> [round(lr_factor(s, warmup=10, decay="cosine", total=110, min_ratio=0.1), 3) for s in (0, 5, 10, 60, 110)]
        [0.1, 0.55, 1.0, 0.55, 0.1]
    """
    if warmup > 0 and step < warmup:
        return start + (1.0 - start) * step / warmup
    if decay != "cosine" or total <= warmup:
        return 1.0
    frac = min(1.0, (step - warmup) / (total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * frac))


class PromptSampler:
    """Seeded per-epoch shuffle of the train split in batches of ``num_prompts`` (NeMo-RL's dataloader role).

    Its ``state_dict()`` is what ``train_dataloader.pt`` holds, so a resumed run continues with the next batch.
    """

    def __init__(self, problems: list[Problem], num_prompts: int, seed: int):
        self.problems, self.num_prompts, self.seed = problems, num_prompts, seed
        self.epoch, self.batch_idx = 0, 0
        self.per_epoch = max(1, len(problems) // num_prompts)

    def next_batch(self) -> list[Problem]:
        if self.batch_idx >= self.per_epoch:
            self.epoch, self.batch_idx = self.epoch + 1, 0
        order = list(range(len(self.problems)))
        random.Random(f"{self.seed}-{self.epoch}").shuffle(order)
        take = order[self.batch_idx * self.num_prompts : (self.batch_idx + 1) * self.num_prompts]
        self.batch_idx += 1
        return [self.problems[i] for i in take]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_idx": self.batch_idx, "seed": self.seed, "num_prompts": self.num_prompts,
                "_num_yielded": self.epoch * self.per_epoch + self.batch_idx}

    def load_state_dict(self, sd: dict) -> None:
        self.epoch, self.batch_idx = int(sd["epoch"]), int(sd["batch_idx"])


@dataclass
class Rollout:
    """One rank's rollouts: token tensors plus the strings and rewards NeMo-RL logs."""

    problems: list[Problem]  # one per sample (each prompt repeated G times)
    prompt_ids: torch.Tensor  # [B, P]
    tokens: torch.Tensor  # [B, T] generated (pad after eos)
    gen_logprobs: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] float, 1 on generated tokens up to and including eos
    lengths: torch.Tensor  # [B]
    finished: torch.Tensor  # [B] bool
    responses: list[str]
    rewards: np.ndarray  # [B]
    correct: np.ndarray  # [B] bool
    gen_seconds: float = 0.0

    @property
    def observations(self) -> list[str]:
        return [ENV_CORRECT if c else ENV_INCORRECT for c in self.correct]

    def response_ids(self, i: int) -> list[int]:
        return self.tokens[i, : int(self.lengths[i])].tolist()


def rollout(engine: Engine, problems: list[Problem], *, repeats: int, mix, max_new_tokens: int, temperature: float,
            generator: torch.Generator | None, answer_format: str = "tags") -> Rollout:
    """Generate ``repeats`` samples per problem with the generation engine and score them with the reward mix (NeMo-RL's
    math env role). Token tensors are ``[B, T]`` with ``T`` the longest response of this batch (≤ max_new_tokens);
    the response texts are in ``answer_format`` (``task.render_answer``), as scored and stored."""
    from nbtools.rehearsal.task import render_answer
    from nbtools.rewards import extract_answer

    expanded = [p for p in problems for _ in range(repeats)]
    prompt_ids = torch.tensor([encode(p.prompt) for p in expanded])
    t0 = time.perf_counter()
    s = engine.sample(prompt_ids, max_new_tokens=max_new_tokens, eos_id=EOS, pad_id=PAD, temperature=temperature,
                      generator=generator)
    gen_seconds = time.perf_counter() - t0
    mask = (torch.arange(s.tokens.shape[1])[None, :] < s.lengths[:, None]).float()
    responses = []
    for i in range(len(expanded)):
        ids = s.tokens[i, : int(s.lengths[i])].tolist()
        # text excludes the eos, like vLLM's output
        responses.append(render_answer(decode(ids[:-1] if s.finished[i] else ids), answer_format))
    gts = [p.ground_truth for p in expanded]
    df = mix.score_components(gts, responses)
    rewards = df["reward"].to_numpy(dtype=float)
    correct = np.array([
        bool(c) if not pd.isna(c) else extract_answer(r) == g
        for c, r, g in zip(df["correct"].tolist(), responses, gts, strict=True)
    ])
    return Rollout(expanded, prompt_ids, s.tokens, s.logprobs, mask, s.lengths, s.finished, responses, rewards, correct,
                   gen_seconds)


def token_logprobs(model, prompt_ids: torch.Tensor, tokens: torch.Tensor, *, temperature: float = 1.0,
                   full: bool = False) -> torch.Tensor:
    """Logprobs of the generated tokens ``[B, T]`` (or of every token after the first, ``[B, P+T-1]``, if full)."""
    ids = torch.cat([prompt_ids, tokens], dim=1)
    logits = model(input_ids=ids).logits[:, :-1].float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(2, ids[:, 1:, None]).squeeze(2)
    return lp if full else lp[:, prompt_ids.shape[1] - 1 :]


def grpo_loss(curr: torch.Tensor, prev: torch.Tensor, ref: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, *,
              clip: float, kl_coef: float, global_tokens: float, world_size: int) -> tuple[torch.Tensor, dict]:
    """NeMo-RL's ClippedPGLoss, token-level: ``max(-A·r, -A·clip(r)) + β·k3(ref‖π)`` summed over the global batch's
    valid tokens / their count (× world size because FSDP averages gradients over ranks). Returns (loss, sums)."""
    ratio = torch.exp(curr - prev)
    clamped = ratio.clamp(1.0 - clip, 1.0 + clip)
    a = adv[:, None]
    pg = torch.maximum(-a * ratio, -a * clamped)
    x = (ref - curr).clamp(-KL_INPUT_CLAMP, KL_INPUT_CLAMP)
    kl = (torch.exp(x) - x - 1.0).clamp(max=KL_OUTPUT_CLAMP)
    per_tok = pg + kl_coef * kl
    local_sum = (per_tok * mask).sum()
    loss = local_sum / global_tokens * world_size
    sums = {
        "loss": float(local_sum.detach()),
        "kl_penalty": float((kl.detach() * mask).sum()),
        "probs_ratio": float((ratio.detach() * mask).sum()),
        "probs_ratio_clamped": float((clamped.detach() * mask).sum()),
        "approx_entropy": float((-curr.detach() * mask).sum()),
    }
    return loss, sums
