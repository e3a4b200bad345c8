"""Reward grading speed: nbtools.rewards vs NeMo-RL's implementation style (regex tag search, isalnum loop).

Why: nbtools hand-writes two things NeMo-RL does with a regex / a generator: the tag search (linear time instead
of the greedy regex, which is quadratic on adversarial responses) and the alphanumeric filter. This prints the
ratio of each against the NeMo-RL-style baseline measured side by side, plus RewardMix.score throughput vs a
per-sample loop of mix(...) calls on GRPO-shaped batches (G samples per prompt, many duplicate responses).

Run: .venv/bin/python benchmarks/bench_rewards.py   (a few seconds; numbers vary with machine load)
     .venv/bin/python benchmarks/bench_rewards.py --tiny   (inputs 1/100 the size, once each: tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import re
import time

from nbtools import rewards
from nbtools.rewards._text import tag_span

NEMO_ANSWER = re.compile(r"<answer>([\s\S]*)</answer>")


def nemo_alnum(answer: str, gt: str) -> bool:  # NeMo-RL exact_answer_alphanumeric_reward's filter
    return "".join(c for c in answer if c.isalnum()).lower() == "".join(c for c in gt if c.isalnum()).lower()


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="inputs 1/100 the size, one repeat (tests/test_benchmarks.py)")
    a = ap.parse_args(argv)
    scale = 100 if a.tiny else 1
    reps = 1 if a.tiny else 5
    normal = ["<think> 3 0 6 </think> <answer> 6 </answer>"] * (20_000 // scale)
    adversarial = "<answer>" * (5_000 // scale)
    big = "<answer>" + "a-b " * (250_000 // scale) + "</answer>"

    rows = []
    t_re = best(lambda: [NEMO_ANSWER.search(r) for r in normal], reps)
    t_us = best(lambda: [tag_span(r, "answer") for r in normal], reps)
    rows.append((f"tag search, {len(normal):,} normal responses", t_re, t_us))
    t_re = best(lambda: NEMO_ANSWER.search(adversarial), 1)
    t_us = best(lambda: tag_span(adversarial, "answer"), reps)
    rows.append((f"tag search, '<answer>' * {len(adversarial) // 8:,}", t_re, t_us))
    ans = big[8:-9]
    t_re = best(lambda: nemo_alnum(ans, "ab"), reps)
    t_us = best(lambda: rewards.exact_alnum("ab", big), reps)
    rows.append((f"exact_alnum on a {len(big) / 1e6:.3g} MB answer", t_re, t_us))

    mix = rewards.combine([{"name": "format", "weight": 0.2}, {"name": "exact_alnum", "weight": 0.8}])
    n = 4096 // scale
    gts = [str(i % 10) for i in range(n)]
    resps = [f"<think> x </think> <answer> {(i * 7) % 10} </answer>" for i in range(n)]
    t_loop = best(lambda: [mix(g, r) for g, r in zip(gts, resps, strict=True)], reps)
    t_score = best(lambda: mix.score(gts, resps), reps)
    rows.append((f"mix of 2 over {n} samples: score() vs per-sample loop", t_loop, t_score))

    print(f"{'case':58s} {'baseline s':>11s} {'nbtools s':>10s} {'ratio':>8s}")
    for name, base, ours in rows:
        print(f"{name:58s} {base:11.4f} {ours:10.4f} {base / ours:7.1f}x")


if __name__ == "__main__":
    main()
