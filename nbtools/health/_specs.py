"""The checks' names, thresholds and fixes (``CHECKS``): what a user reads and changes.

Thresholds: ``warning`` and ``unhealthy`` levels; ``higher_is_worse`` says which way a value crosses them. Metric
names are NeMo-RL's (nemo-rl-facts.md §2); the fixes name config keys of ``nbtools.config``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nbtools.health._report import Status

__all__ = ["CheckSpec", "CHECKS"]


@dataclass(frozen=True)
class CheckSpec:
    """One check's name, thresholds (``warning``, ``unhealthy``; None: that level is never reached) and fix.

    ``higher_is_worse`` says which way a value crosses its thresholds.
    """

    name: str
    warning: float | None
    unhealthy: float | None
    higher_is_worse: bool
    what: str
    fix: str
    keys: tuple[str, ...]

    def level(self, value: float | None) -> tuple[Status, float | None]:
        """(status, the threshold crossed — or the warning threshold when none is)."""
        if value is None or np.isnan(value):
            return "ok", self.warning if self.warning is not None else self.unhealthy
        for status, t in (("unhealthy", self.unhealthy), ("warning", self.warning)):
            if t is not None and (value >= t if self.higher_is_worse else value <= t):
                return status, t  # type: ignore[return-value]
        return "ok", self.warning if self.warning is not None else self.unhealthy

    def crossed(self, series: pd.Series, t: float | None) -> pd.Series:
        if t is None:
            return series.astype(bool) & False
        return series >= t if self.higher_is_worse else series <= t

    def fix_text(self) -> str:
        return f"{self.fix} (config: {', '.join(f'`{k}`' for k in self.keys)})" if self.keys else self.fix


def _spec(name, warning, unhealthy, higher, what, fix, keys) -> CheckSpec:
    return CheckSpec(name, warning, unhealthy, higher, what, fix, tuple(keys))


CHECKS: dict[str, CheckSpec] = {s.name: s for s in (
    _spec("zero-reward", 0.9, 0.99, True, "share of rewards that are 0 over the recent steps (1.0 when every reward "
          "is the same value)",
          "check that the reward functions parse what the prompt asks for (nbtools.launch.lint's reward-contract "
          "rule; notebook 08 re-scores stored responses with another mix)",
          ["trainer.reward_functions", "rehearsal.reward_functions", "data.prompt_file"]),
    _spec("no-signal-groups", 0.6, 0.95, True, "share of GRPO groups whose samples all got the same reward (zero "
          "advantage: the step trains on nothing)",
          "more generations per prompt, a higher temperature, or a dataset of the model's difficulty; a reward with "
          "partial credit separates samples too",
          ["grpo.num_generations_per_prompt", "grpo.temperature", "data.dataset"]),
    _spec("answer-format", 0.5, 0.9, True, "share of responses the reward functions cannot parse (no answer tag / "
          "no \\boxed{})",
          "make the prompt ask for the format the rewards parse, or choose rewards that parse what it asks for",
          ["data.prompt_file", "trainer.reward_functions", "rehearsal.reward_functions"]),
    _spec("truncation", 0.1, 0.5, True, "share of generations that hit the generation limit",
          "raise the generation limit (and the total sequence length with it), or penalise overlong answers",
          ["grpo.max_new_tokens", "model.max_total_sequence_length", "rehearsal.max_new_tokens"]),
    _spec("logprob-mismatch", 1.05, 1.5, True, "train vs inference token probability ratio, mean exp(|Δ logprob|) "
          "(NeMo-RL's train/token_mult_prob_error; 1.0 is a perfect match)",
          "check the weight refit and the generation precision (vLLM's dtype / kv-cache dtype vs the policy's); "
          "importance-sampling correction bounds the damage",
          ["trainer.vllm_cfg", "trainer.overrides"]),
    _spec("length-collapse", 0.5, 0.25, False, "recent mean generation length / the first steps' mean",
          "the policy is collapsing onto short answers: lower the learning rate, raise the KL penalty, or check a "
          "length penalty in the rewards",
          ["grpo.learning_rate", "grpo.kl_penalty", "trainer.reward_functions"]),
    _spec("length-runaway", 2.0, 4.0, True, "recent mean generation length / the first steps' mean",
          "lengths are running away: add an overlong penalty (length_penalty reward), lower the learning rate, or "
          "cap the generation limit",
          ["trainer.reward_functions", "grpo.learning_rate", "grpo.max_new_tokens"]),
    _spec("entropy-blowup", 2.0, 4.0, True, "recent mean policy entropy / the first steps' mean (NeMo-RL's "
          "train/approx_entropy, verl's actor/entropy)",
          "the policy is turning random (it often rambles to the generation limit with it): lower the learning rate, "
          "raise the KL penalty, or lower the sampling temperature",
          ["grpo.learning_rate", "grpo.kl_penalty", "grpo.temperature"]),
    _spec("kl-runaway", 0.5, 2.0, True, "KL to the reference policy over the recent steps (train/kl_penalty)",
          "the policy is drifting far from the reference: raise the KL penalty or lower the learning rate",
          ["grpo.kl_penalty", "grpo.learning_rate"]),
    _spec("reward-stalled", 0.01, None, False, "mean reward of the recent steps minus that of the first steps, "
          "while groups still carry signal",
          "the run has signal but does not improve: raise the learning rate (or its warm-up), or check the "
          "advantages (normalize_rewards, leave-one-out baseline)",
          ["grpo.learning_rate", "grpo.normalize_rewards", "grpo.use_leave_one_out_baseline"]),
    _spec("val-divergence", 0.05, 0.15, True, "validation accuracy lost since its best while training reward rose",
          "the policy overfits the training prompts (or games the reward): keep the best checkpoint by "
          "val:accuracy, lower the learning rate, raise the KL penalty",
          ["checkpointing.metric_name", "grpo.learning_rate", "grpo.kl_penalty"]),
)}
