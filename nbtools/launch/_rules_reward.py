r"""The ``reward-contract`` lint rule: the experiment's reward functions must score what its prompt asks for.

Why: a prompt that asks for ``\boxed{}`` and a reward that parses ``<answer>`` tags give every sample 0, with no
error, for the whole paid run. The rule reads both from the config alone (it holds for every trainer): the reward
functions (``trainer.reward_functions``, or the rehearsal task's ``rehearsal.reward_functions``), and the prompt —
``data.prompt_file``, else the recipe's ``data.default.prompt_file`` (v0.6+) / ``data.prompt_file`` (v0.5), looked up
in NeMo-RL's shipped prompts or as a local file — or, for the rehearsal task, its own answer format. The check itself
is ``nbtools.health.reward_contract``; a previous run's responses in ``cfg.logs_url`` are scored with it when their
answers are known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbtools import health, rewards, storage
from nbtools.config import Experiment
from nbtools.errors import NbtoolsError
from nbtools.trainers import Finding, LintReport

__all__ = ["check_reward_contract", "asked_format"]

RULE = "reward-contract"


def _rehearsal_task(cfg: Experiment) -> bool:
    return cfg.data.dataset == cfg.rehearsal.task


def _recipe_prompt(cfg: Experiment) -> str | None:
    if not cfg.trainer.recipe:
        return None
    from nbtools.trainers import nemo_rl

    return nemo_rl.recipe_value(cfg, "data.default.prompt_file", "data.prompt_file")


def asked_format(cfg: Experiment) -> health.ResponseFormat | None:
    """What the experiment's prompt asks the model to answer in; None when it cannot be told from here."""
    if _rehearsal_task(cfg):  # the generated task's responses: ``task.format_response`` (think + answer tags)
        return health.ResponseFormat("tags", "answer", "think", source=f"the {cfg.rehearsal.task} task's format")
    path = cfg.data.prompt_file or _recipe_prompt(cfg)
    if not path:
        return None
    text = health.nemo_rl_prompt(path)
    if text is None:
        p = Path(path).expanduser()
        p = p if p.is_absolute() else (Path(cfg.source).parent if cfg.source else Path.cwd()) / p
        if not p.is_file():
            return None
        text = p.read_text(errors="replace")
    return health.format_asked_by(text, source=path)


def _spec_and_mix(cfg: Experiment) -> tuple[list[dict[str, Any]], Any] | None:
    if _rehearsal_task(cfg):
        spec = [dict(x) for x in cfg.rehearsal.reward_functions]
        return spec, rewards.combine(spec)
    if not cfg.trainer.reward_functions:
        return None  # the trainer's own environment grades (NeMo-RL's math env: math-verify on \boxed{})
    return [dict(x) for x in cfg.trainer.reward_functions], rewards.check_rewards(cfg)


def _real_responses(cfg: Experiment, trainer: Any = None, n: int = 32) -> list[tuple[str, str]]:
    """(response, answer) of the newest step of a previous run in ``cfg.logs_url``, when its answers are known."""
    try:
        truth = rewards.ground_truth(cfg, trainer=trainer)
        if not storage.exists(cfg.logs_url):
            return []
        from nbtools import trajectories

        run = trajectories.open_run(cfg.logs_url)
        if not run.steps:
            return []
        df = run.read(run.steps[-1], columns=["prompt", "response"]).head(n)
        return [(r, truth(p)) for p, r in zip(df["prompt"], df["response"], strict=True)
                if isinstance(r, str) and isinstance(p, str)]
    except (NbtoolsError, OSError, ValueError):
        return []


def check_reward_contract(cfg: Experiment, r: LintReport, *, severity: str = "blocking", trainer: Any = None) -> None:
    """Append a ``reward-contract`` finding to ``r`` when the rewards cannot score what the prompt asks for
    (``trainer``: the run's, where the caller resolved it)."""
    if severity == "off":
        return
    r.checked.append(RULE)
    try:
        got = _spec_and_mix(cfg)
    except NbtoolsError:
        return  # an unknown reward name or module: reported by the rules that build the mix
    if got is None:
        return
    spec, mix = got
    asks = asked_format(cfg)
    problems = [(p.prompt, p.ground_truth) for p in _task_problems(cfg)] or list(health.SAMPLE_PROBLEMS)
    result = health.reward_contract(spec, asks=asks, problems=problems, real=_real_responses(cfg, trainer), mix=mix)
    if result.ok:
        return
    key = "rehearsal.reward_functions" if _rehearsal_task(cfg) else "trainer.reward_functions"
    r.findings.append(Finding(severity, RULE, key, result.message, result.fix))  # type: ignore[arg-type]


def _task_problems(cfg: Experiment, n: int = 6) -> list:
    if not _rehearsal_task(cfg):
        return []
    from nbtools.rehearsal.task import held_out_problems

    return held_out_problems(cfg)[:n]
