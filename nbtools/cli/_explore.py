"""`nbtools explore RUN` and `nbtools rescore RUN`: notebook 05's explorer and notebook 08's re-scoring at a terminal.

Why: the same questions — which records of step N were judged correct, which contain "</think>", what would a new
reward have done to the groups' learning signal — come up in scripts and over SSH, without a kernel. Both take the
run the way ``trajectories`` and ``health`` do (RUN: a logs dir or an exp_NNN dir; a run dir or an experiment file is
followed to its logs dir), the experiment as ``--experiment EXPERIMENT.yaml`` (default: RUN itself when it is the
experiment file), and ``--json``. The numbers are ``nbtools.explorer.ExplorerData``'s and ``nbtools.rewards.rescore``'s.

Example:
    $ nbtools explore runs/local-rehearsal/logs --step 120 --show incorrect --search '</think>'
    $ nbtools explore runs/local-rehearsal/logs --step 120 --record 7
    $ nbtools rescore experiments/local.yaml --reward-module experiments/my_rewards.py --reward closeness=0.3
"""

from __future__ import annotations

from typing import Any

from nbtools.cli._out import Out, _records

__all__ = ["register_explore"]

_RUN_HELP = "the run's logs dir or an exp_NNN dir (a run dir or an experiment file: their logs dir)"


def register_explore(sub) -> None:
    """Add ``explore`` and ``rescore`` to the ``nbtools`` parser."""
    what = "one page of a run's records, filtered, searched and sorted as notebook 05's explorer does (or one record)"
    p = sub.add_parser("explore", help=what, description=what + ". Exit 0, 1 when the step or record does not exist.")
    p.set_defaults(func=cmd_explore)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("run", metavar="RUN", help=_RUN_HELP)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--step", type=int, help="the step to show (default: the latest)")
    scope.add_argument("--all-steps", action="store_true", help="every step of the run at once")
    p.add_argument("--show", default="all", help="filter: all, correct, incorrect, 'groups with signal', 'groups with no "
                   "signal' or 'no answer tag' (default all)")
    p.add_argument("--search", default="", help="text in the prompt or response (case-insensitive)")
    p.add_argument("--regex", action="store_true", help="--search is a regular expression")
    p.add_argument("--sort", default="file order", help="order of the rows: 'file order', or 'reward ↓' / 'reward ↑' "
                   "and the same for advantage, length, 'group mean' (default 'file order')")
    p.add_argument("--page", type=int, default=1, help="1-based page (default 1; -1 the last)")
    p.add_argument("--page-size", type=int, default=20, help="records per page (default 20)")
    p.add_argument("--record", type=int, metavar="IDX", help="show one record of the step in full instead of a page")
    p.set_defaults(usage_check=_check_choices)

    what = "re-score a run's stored trajectories with a reward mix and compare GRPO's learning signal, old vs new"
    p = sub.add_parser("rescore", help=what, description=what + " (notebook 08). Without --reward, the run's own mix: "
                       "0 rewards changed confirms the re-scoring reproduces the run. Exit 0, 1 on a failure.")
    p.set_defaults(func=cmd_rescore)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("run", metavar="RUN", help=_RUN_HELP)
    p.add_argument("--experiment", metavar="EXPERIMENT.yaml", default=None,
                   help="the experiment that made the run: its reward mix, answers and advantage rule (default: RUN "
                        "itself when RUN is the experiment file)")
    p.add_argument("--reward", action="append", default=[], metavar="NAME=WEIGHT",
                   help="add a registered reward to the run's mix, or change its weight (repeatable; weights are "
                        "renormalised to sum to 1); WEIGHT 0 drops it")
    p.add_argument("--reward-module", metavar="FILE.py", action="append", default=[],
                   help="a module that registers rewards (@nbtools.rewards.register), e.g. experiments/my_rewards.py")
    p.add_argument("--step", type=int, action="append", metavar="N", help="only these steps (repeatable)")


def _check_choices(a) -> str | None:
    """--show and --sort against the explorer's own lists, checked after parsing so that building the parser (every
    command, ``--help``) does not import the explorer and pandas."""
    from nbtools.explorer import FILTERS, SORTS

    for flag, value, allowed in (("--show", a.show, FILTERS), ("--sort", a.sort, list(SORTS))):
        if value not in allowed:
            return f"argument {flag}: invalid choice: {value!r} (choose from {', '.join(map(repr, allowed))})"
    return None


def _open(a, command: str):
    from nbtools import trajectories
    from nbtools.cli._kinds import resolve

    found = resolve(a.run, want="logs", flag="RUN", command=command)
    return trajectories.open_run(found.path), found


def _step(steps: list[int], step: int | None) -> int:
    """The step asked for (default the latest), or a NotFoundError naming the steps there are (never the nearest one,
    silently: ``trajectories --step 9999`` once listed the last steps instead)."""
    from nbtools.errors import NotFoundError

    if not steps:
        raise NotFoundError("the run has no train_data_step*.jsonl yet",
                            fix="wait for its first step (nbtools jobs status EXPERIMENT.yaml shows its progress)")
    if step is None:
        return steps[-1]
    if step not in steps:
        near = sorted(steps, key=lambda s: abs(s - step))[:3]
        raise NotFoundError(f"step {step} has no records; the run has {len(steps)} steps, {steps[0]}–{steps[-1]}",
                            fix=f"pass --step with one of them, e.g. {', '.join(map(str, sorted(near)))}")
    return step


def cmd_explore(a) -> Out:
    from nbtools.errors import ConfigError, NotFoundError
    from nbtools.explorer import BrowseState, ExplorerData, record_text

    if a.page_size < 1:
        raise ConfigError(f"--page-size: expected a positive number, got {a.page_size}", fix="pass --page-size 20")
    run, _ = _open(a, "explore")
    data = ExplorerData(run)
    step = None if a.all_steps else _step(data.steps, a.step)
    state = BrowseState(data, step=step if step is not None else data.steps[-1], page_size=a.page_size)
    state.go(step=step, show=a.show, search=a.search, regex=a.regex, sort=a.sort)
    if a.record is not None:
        if step is None:
            raise ConfigError("--record needs one step, not --all-steps", fix="pass --step N with --record IDX")
        idxs = data.table(step)["idx"]
        if a.record not in set(idxs):
            raise NotFoundError(f"step {step} has no record idx {a.record} (it has idx {idxs.min()}–{idxs.max()})",
                                fix="pass an idx the page shows (nbtools explore RUN --step N)")
        rec = data.record(step, a.record)
        doc = {k: rec.get(k) for k in ("step", "idx", "prompt", "response", "reward", "advantage", "generation_length",
                                       "env_observation")}
        return Out(doc, record_text(data, step, a.record))
    page = state.go(a.page - 1 if a.page > 0 else a.page)
    if a.page > page.pages:
        raise NotFoundError(f"--page {a.page}: the selection has {page.pages} page(s) of {a.page_size}",
                            fix=f"pass --page 1 to {page.pages} (or -1 for the last)")
    cols = ["step", "idx", "group", "reward", "advantage", "generation_length", "correct", "response"]
    doc: dict[str, Any] = {"query": {"step": step, "show": a.show, "search": a.search, "sort": a.sort},
                           "page": page.number + 1, "pages": page.pages, "total": page.total,
                           "in_scope": page.in_scope, "rows": _records(page.rows[cols])}
    lines = [state.status()]
    if page.total:
        widths = (5, 4, 5, 7, 7, 5, 7)
        head = ("step", "idx", "group", "reward", "adv", "len", "correct")
        lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)) + "  response")
        for row in state.rows():
            lines.append("  ".join(v.rjust(w) for v, w in zip(row[:7], widths, strict=True)) + "  " + row[7][:70])
    else:
        lines.append("no record matches: change --show / --search (or --all-steps)")
    return Out(doc, "\n".join(lines))


def _reward_spec(items: list[str]) -> dict[str, float]:
    from nbtools.errors import ConfigError

    out, bad = {}, []
    for item in items:
        name, eq, weight = item.partition("=")
        try:
            if not eq:
                raise ValueError(item)
            out[name.strip()] = float(weight)
        except ValueError:
            bad.append(f"--reward {item!r}: expected NAME=WEIGHT, e.g. closeness=0.3")
    if bad:
        raise ConfigError(bad, fix="pass --reward NAME=WEIGHT (NAME registered, WEIGHT a number)")
    return out


def _import_module(path: str) -> None:
    import importlib.util
    from pathlib import Path

    from nbtools.errors import NotFoundError

    p = Path(path)
    if not (p.is_file() and p.suffix == ".py"):
        raise NotFoundError(f"--reward-module {path}: expected a .py file that registers rewards, found "
                            f"{'a directory' if p.is_dir() else 'nothing'} there",
                            fix="pass the module's path, e.g. --reward-module experiments/my_rewards.py")
    spec = importlib.util.spec_from_file_location(f"nbtools_cli_rewards_{p.stem}", p)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def cmd_rescore(a) -> Out:
    from nbtools import config, rewards
    from nbtools.errors import ConfigError

    changes = _reward_spec(a.reward)
    run, found = _open(a, "rescore")
    cfg = config.load(a.experiment) if a.experiment else found.experiment
    if cfg is None:
        raise ConfigError("rescore needs the experiment that made the run (its reward mix, answers, advantage rule)",
                          fix="pass --experiment EXPERIMENT.yaml, or the experiment file itself as RUN")
    for module in a.reward_module:
        _import_module(module)
    mix = [dict(x) for x in rewards.trained_with(cfg)]
    for name, weight in changes.items():
        mix = [m for m in mix if m["name"] != name] + ([{"name": name, "weight": weight}] if weight else [])
    if not mix:
        raise ConfigError("the new mix is empty (every reward was given weight 0)", fix="keep at least one reward")
    steps = [_step(run.steps, s) for s in a.step] if a.step else None
    df = run.read() if steps is None else run.read().loc[lambda d: d["step"].isin(steps)]
    result = rewards.rescore(df, mix, cfg=cfg, progress=False)
    summary = result.summary()
    table = result.table()
    doc = {"mix": mix, "summary": dict(summary), "steps": _records(table)}
    shown = table.round({"old_reward": 3, "new_reward": 3, "new_accuracy": 3})
    weights = ", ".join(f"{m['name']} {m.get('weight', 1):g}" for m in mix)
    text = f"mix: {weights}\n{summary!r}\n\n{shown.to_string(index=False)}"
    return Out(doc, text)

