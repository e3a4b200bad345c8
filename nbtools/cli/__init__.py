"""The `nbtools` command line: the notebooks' calls for scripts, CI pipelines and headless runs.

Why: the same users run things from a terminal, a Makefile or a CI job; each subcommand is one library call.
A thin layer with no logic of its own. Exit status: 0 success, 2 bad usage, 1 failure (the error and its fix
on stderr, in the CLI's words: each error carries its fix in both forms, ``nbtools.errors.Fix``). With ``--json``
stdout carries exactly one JSON document, failures included (``{"error": ..., "fix": ..., "type": ..., "exit":
...}``, plus the command's own data where it has some); everything else the library prints (progress bars,
logs, child processes) goes to stderr. Experiment files take NeMo-RL-style ``key=value`` overrides after the
path, before or after the flags (``nbtools launch experiments/local.yaml --lint-only grpo.max_num_steps=20``).
The experiment is named one way: ``EXPERIMENT.yaml`` first where it is what the command acts on (plan, manifests,
up, down, launch, jobs, prepare, fit), ``--experiment EXPERIMENT.yaml`` where the command acts on something else
(health, diagnose, card, rescore; health's old ``--config`` still works and says it is deprecated). Commands that change
something are dry runs unless ``--apply`` (the notebooks' ``APPLY``). A path argument of the wrong kind (a run dir
for a logs dir, an experiment file for a log) is followed to the right thing with a note, or refused with the fix
(``nbtools.cli._kinds``), never answered.

Example:
    $ nbtools checkpoints runs/local-rehearsal/checkpoints --json
    $ nbtools merge runs/local-rehearsal/checkpoints/step_200 /tmp/merged --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from nbtools.cli._out import Out, _jsonable

__all__ = ["main", "build_parser", "Out"]


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree: one subcommand per notebook step (``nbtools COMMAND --help``)."""
    from nbtools.cli._commands import (
        cmd_checkpoints,
        cmd_compare,
        cmd_demo,
        cmd_down,
        cmd_eval_parse,
        cmd_jobs,
        cmd_launch,
        cmd_manifests,
        cmd_merge,
        cmd_plan,
        cmd_trajectories,
        cmd_up,
    )

    ap = _Parser(prog="nbtools", description="GRPO with NeMo-RL / verl on Ray: the notebooks' steps "
                                 "as commands. Exit 0 ok, 1 failure (fix on stderr), 2 bad usage.")
    ap.add_argument("--version", "-V", action="store_true", help="print the version and exit")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name, fn, help, *, experiment=False, json_flag=True):
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=fn)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
        if experiment:
            p.add_argument("experiment", metavar="EXPERIMENT.yaml")
            p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. grpo.max_num_steps=20")
            p.add_argument("--backend", choices=["local", "gke", "ray"], help="override the file's backend")
        return p

    p = add("plan", cmd_plan, "the GKE provisioning plan for an experiment (or its bash script)", experiment=True)
    p.add_argument("--script", action="store_true", help="print the idempotent bash script")
    p.add_argument("--destroy", action="store_true",
                   help="the teardown plan instead: RayCluster, GPU pool, cluster first; the bucket last, only if empty")
    p.add_argument("--delete-bucket", metavar="BUCKET",
                   help="with --destroy: also delete this bucket (must be the experiment's) with everything in it")
    p = add("manifests", cmd_manifests, "render the Kubernetes manifests for a gke experiment", experiment=True)
    p.add_argument("--out", metavar="DIR", help="write <name>.yaml into DIR (atomically) instead of printing")
    for name, fn, what in (("up", cmd_up, "bring the Ray cluster up (or re-attach)"),
                           ("down", cmd_down, "stop what nbtools started for the experiment")):
        p = add(name, fn, f"{what}; a dry run unless --apply", experiment=True)
        p.add_argument("--apply", action="store_true", help="really do it (default: say what would happen)")
        if name == "up":
            p.add_argument("--timeout", type=float, help="seconds to wait until the cluster answers (default: the backend's)")
    p = add("launch", cmd_launch, "lint and submit the experiment's GRPO job (re-attaches when already submitted)",
            experiment=True)
    p.add_argument("--lint-only", action="store_true", help="only lint (exit 1 on blocking findings) and show the command")
    p.add_argument("--follow", action="store_true", help="follow the job's steps until it ends (or --timeout)")
    p.add_argument("--resume", action="store_true", default=None, help="allow resuming from existing step_N checkpoints")
    p.add_argument("--timeout", type=float, default=None, help="seconds to follow at most")
    p.add_argument("--ignore-fit", action="store_true", help="submit even if the GPU memory fit check says it cannot fit")
    from nbtools.cli._supervise import add_launch_flags, register_diagnose

    add_launch_flags(p)
    p = sub.add_parser("jobs", help="list jobs, or show the status / logs of one, or stop it",
                       description="list jobs, or show the status / logs of one, or stop it")
    p.set_defaults(func=cmd_jobs)
    p.add_argument("action", choices=["list", "status", "logs", "stop"])
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("experiment", metavar="EXPERIMENT.yaml", help="the cluster address comes from it (cfg.dashboard_url)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--backend", choices=["local", "gke", "ray"], help="override the file's backend")
    p.add_argument("--id", help="submission id (default: the experiment's own, name + config hash)")
    p.add_argument("--timeout", type=float, default=60, help="stop: seconds to wait until it ended")
    from nbtools.cli._prepare import add_prepare

    add_prepare(add)
    p = add("trajectories", cmd_trajectories, "steps and records of a run's train_data_step*.jsonl")
    p.add_argument("run", metavar="RUN", help="an exp_NNN dir or a logs dir (its latest exp_NNN); a run dir or an "
                   "experiment file: their logs dir")
    p.add_argument("--step", type=int, help="also print this step's rows (with --browse: the step to open)")
    p.add_argument("--browse", action="store_true",
                   help="page through the records in the terminal (SSH-friendly): search, filters, a record view")
    p.set_defaults(usage_check=lambda a: "--browse is interactive: it cannot print JSON (leave out --json)"
                   if a.browse and a.json else None)
    from nbtools.cli._metrics import add_metrics

    add_metrics(add)
    p = add("checkpoints", cmd_checkpoints, "steps, layout and training_info of a checkpoint_dir")
    p.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR",
                   help="the dir holding step_N (a run dir or an experiment file: their checkpoint dir)")
    p = add("merge", cmd_merge, "merge a step_N checkpoint (a path or gs://…) into a verified HuggingFace directory, "
            "here or, with --in-cluster, by a Ray job where the checkpoint lives")
    p.add_argument("step_dir", metavar="STEP_DIR", help="step_N dir (path or URL); with --in-cluster also a step number")
    p.add_argument("out_dir", metavar="OUT_DIR", nargs="?",
                   help="where the model goes (local; with --in-cluster as the cluster sees it, default merged_hf)")
    p.add_argument("--in-cluster", metavar="EXPERIMENT.yaml",
                   help="merge by a Ray job on this experiment's cluster, next to the checkpoint (notebook 06's way)")
    p.add_argument("--config", metavar="PATH", help="base model dir or config.json (default: the checkpoint's own)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.set_defaults(usage_check=lambda a: None if a.out_dir or a.in_cluster else
                   "OUT_DIR is missing: a merge on this machine writes a HuggingFace directory there "
                   "(pass OUT_DIR, or --in-cluster EXPERIMENT.yaml to merge where the checkpoint lives)")
    p = add("eval-parse", cmd_eval_parse, "every NeMo-RL run_eval.py score block in a log file")
    p.add_argument("logfile", metavar="LOGFILE")
    p = add("compare", cmd_compare, "compare two evaluations (per-problem results or score blocks) with statistics")
    p.add_argument("a", metavar="A", help="baseline: results dir, evaluation_data.json, .csv/.parquet/.jsonl, log[#N] or S/T")
    p.add_argument("b", metavar="B", help="the model being judged, same kinds")
    p.add_argument("--names", nargs=2, default=["baseline", "fine-tuned"], metavar=("NAME_A", "NAME_B"))
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict, in (0, 1)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="compare evaluations of different datasets or problem sets anyway (said loudly in the notes)")
    p = add("demo", cmd_demo, "run the numbered notebooks on the local backend (what `make demo` runs)")
    p.add_argument("--only", nargs="*", help="notebook number prefixes, e.g. 02 03")
    p.add_argument("--out", help="output directory (default runs/<timestamp>)")
    p.add_argument("--notebooks-dir", help="where the notebooks are (default: the project's notebooks/)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    from nbtools.cli._card import register_card
    from nbtools.cli._evaluate import register_evaluate
    from nbtools.cli._explore import register_explore
    from nbtools.cli._fit import register_fit
    from nbtools.cli._health import register_health
    from nbtools.cli._stall import register_stall

    register_fit(sub)
    register_evaluate(sub)
    register_diagnose(sub)
    register_stall(add)
    register_card(sub)
    register_health(sub)
    register_explore(sub)
    return ap


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing and exiting, so ``--json`` can report it too."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        from nbtools.cli._errors import UsageError

        raise UsageError(message, self.format_usage(), self.prog)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse with each subcommand's own parser, intermixed: ``KEY=VALUE`` overrides may follow the flags."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if argv and argv[0] in sub.choices:
        ns = sub.choices[argv[0]].parse_intermixed_args(argv[1:])
        ns.command = argv[0]
        return ns
    return parser.parse_args(argv)


_EXPERIMENT_FIX = "correct each value listed above in the experiment file or the KEY=VALUE overrides"


@contextlib.contextmanager
def _stdout_to_stderr():
    """Point fd 1 (and sys.stdout) at stderr; yield a writer for the real stdout (child processes included)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real = os.fdopen(saved, "w", encoding="utf-8", closefd=False)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield real
        sys.stdout.flush()
        os.dup2(saved, 1)
        real.flush()
    except BrokenPipeError:  # the reader left (`| head`): what is still buffered goes to /dev/null, not a traceback
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, saved)
        os.dup2(null, 1)
        os.close(null)
        real.close()
        raise
    finally:
        os.dup2(saved, 1)  # stdout is stdout again (or /dev/null after a broken pipe)
        os.close(saved)


def _usage(e, argv: list[str], json_out: bool) -> int:
    from nbtools.cli._errors import Failure
    from nbtools.config import redact, token_kind

    words = [redact(w) if token_kind(w) or token_kind(w.partition("=")[2]) else w for w in argv]
    message = e.message
    for w, shown in zip(argv, words, strict=True):
        if w != shown:
            message = message.replace(w, shown)
    prog = e.prog
    f = Failure(message, f"see `{prog} --help`", "UsageError", code=2)
    sys.stderr.write(f"{e.usage}{prog}: error: {message}\n")
    if json_out:
        sys.stdout.write(json.dumps(f.doc(prog.partition(" ")[2] or None)) + "\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; return the exit status (0 ok, 1 failure with the fix on stderr, 2 bad usage).

    With ``--json`` stdout carries exactly one JSON document, failures included:
    ``{"error": ..., "fix": ..., "type": ..., "exit": ...}`` (plus the command's own data where it has some).

    Example:
        >>> nbtools.cli.main(["checkpoints", "runs/local-rehearsal/checkpoints", "--json"])
        0
    """
    from nbtools.cli._errors import UsageError

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        from nbtools import __version__

        sys.stdout.write(f"nbtools {__version__} (distribution nbtools-grpo)\n")
        return 0
    json_out = "--json" in argv
    parser = build_parser()
    try:
        args = _parse(parser, argv)
        bad = [o for o in getattr(args, "overrides", []) if "=" not in o or o.startswith("=")]
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.get(args.command)
        if bad:
            sub.error(f"overrides must be KEY=VALUE (e.g. grpo.max_num_steps=20); got {bad}")
        # a combination argparse cannot express (an argument required unless a flag is given) is bad usage too
        problem = getattr(args, "usage_check", lambda _: None)(args)
        if problem:
            sub.error(problem)
    except UsageError as e:
        return _usage(e, argv, json_out)
    json_out = bool(getattr(args, "json", False))
    try:
        return _run(args, json_out)
    except BrokenPipeError:  # the reader stopped early (`| head`): no traceback, nothing more to write
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what `cat` reports in the same pipe


def _run(args, json_out: bool) -> int:
    from nbtools.cli._errors import describe

    fallback = _EXPERIMENT_FIX if hasattr(args, "overrides") else f"check the arguments against `nbtools {args.command} --help`"
    with _stdout_to_stderr() as real:
        try:
            out = args.func(args)
        except KeyboardInterrupt:
            print(f"nbtools {args.command}: interrupted (nothing half-written is left behind)", file=sys.stderr)
            if json_out:
                real.write(json.dumps({"error": "interrupted", "fix": "re-run the command; nothing half-written is "
                                       "left behind", "type": "KeyboardInterrupt", "exit": 130,
                                       "command": args.command}) + "\n")
            return 130
        except Exception as e:  # noqa: BLE001 - every failure becomes a message and a fix, never a traceback
            f = describe(e, fallback_fix=fallback)
            print(f.text(args.command), file=sys.stderr)
            if json_out:
                real.write(json.dumps(_jsonable(f.doc(args.command))) + "\n")
            if os.environ.get("NBTOOLS_DEBUG"):
                raise
            return f.code
        error, fix = out.error or f"exit status {out.code}", out.fix or f"see `nbtools {args.command} --help`"
        if json_out:
            data = _jsonable(out.data)
            if out.code and not out.exact:
                data = {**(data if isinstance(data, dict) else {"data": data}), "error": error, "fix": fix,
                        "exit": out.code, "command": args.command}
            real.write(json.dumps(data) + "\n")
        else:
            text = out.text if out.text is not None else json.dumps(_jsonable(out.data), indent=2)
            real.write(text if text.endswith("\n") else text + "\n")
    if out.code:
        print(f"nbtools {args.command}: error: {error}\n  fix: {fix}", file=sys.stderr)
    return out.code


if __name__ == "__main__":
    sys.exit(main())
