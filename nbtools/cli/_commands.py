"""The subcommands of `nbtools` (see ``nbtools.cli``): each loads its arguments and makes one library call.

Library modules are imported inside each function so ``nbtools --help`` stays fast.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from nbtools import _atomic
from nbtools.cli._load import load_cfg
from nbtools.cli._out import Out, _jsonable, _records

__all__ = [
    "cmd_plan", "cmd_manifests", "cmd_up", "cmd_down", "cmd_launch", "cmd_jobs", "cmd_trajectories",
    "cmd_checkpoints", "cmd_merge", "cmd_eval_parse", "cmd_compare", "cmd_demo",
]


def cmd_plan(a) -> Out:
    from nbtools import backends

    cfg = load_cfg(a)
    cluster = backends.get(cfg)
    if a.delete_bucket and not a.destroy:
        from nbtools.errors import ConfigError

        raise ConfigError("--delete-bucket only applies to the teardown plan; fix: add --destroy", source=cfg.source)
    plan = cluster.destroy_plan(delete_bucket=a.delete_bucket) if a.destroy else cluster.provision_plan()
    steps = _records(plan.show())
    text = plan.to_script() if a.script else "\n".join(
        [f"{plan.kind} plan for {cfg.name}: {len(steps)} steps (state: {plan.state_path}); `--script` prints bash"]
        + ([f"note: {plan.note}"] if plan.note else [])
        + [f"{i:>3}. [{s['status']}] {s['step']}: {s['what']}\n       {s['command']}" for i, s in enumerate(steps, 1)])
    return Out({"experiment": cfg.name, "kind": plan.kind, "state": str(plan.state_path), "steps": steps,
                "applicable": plan.applicable, "note": plan.note,
                **({"script": plan.to_script()} if a.script else {})}, text)


def cmd_manifests(a) -> Out:
    from nbtools import backends, manifests

    cfg = backends.gke_view(load_cfg(a))  # a non-gke experiment: the objects it would need on GKE
    objs, text = manifests.all_objects(cfg), manifests.render(cfg)
    kinds = [{"kind": o["kind"], "name": o["metadata"]["name"]} for o in objs]
    if not a.out:
        return Out({"experiment": cfg.name, "objects": objs}, text)
    target = Path(a.out) / f"{cfg.name}.yaml"
    _atomic.write_text(target, text)
    return Out({"experiment": cfg.name, "out": str(target), "objects": kinds}, f"wrote {len(objs)} objects to {target}")


def _res(handle) -> dict:
    r = handle.resources()
    return {k: getattr(r, k) for k in ("nodes", "cpus", "gpus", "memory_bytes", "object_store_bytes")}


def cmd_up(a) -> Out:
    from nbtools import backends

    cfg = load_cfg(a)
    cluster = backends.get(cfg)
    if not a.apply:
        p = cluster.preview("up")
        return Out(p.to_dict(), f"{p}; re-run with --apply to do it")
    handle = cluster.up(timeout=a.timeout, progress=sys.stderr.isatty())
    data = {**handle.to_dict(), "dry_run": False, "resources": _res(handle)}
    how = "re-attached to" if handle.reattached else ("started" if handle.started_by_us else "attached to")
    return Out(data, f"{how} the {cfg.backend} Ray cluster at {handle.dashboard_url}: {data['resources']}"
               + (f"\nnote: {handle.note}" if handle.note else ""))


def cmd_down(a) -> Out:
    from nbtools import backends

    cfg = load_cfg(a)
    cluster = backends.get(cfg)
    if not a.apply:
        p = cluster.preview("down")
        return Out(p.to_dict(), f"{p}; re-run with --apply to do it")
    td = cluster.down()
    return Out({**td.to_dict(), "dry_run": False}, f"{td.message}\n{td.actions.to_string(index=False)}")


def cmd_launch(a) -> Out:
    from nbtools import backends, launch, trainers

    cfg = load_cfg(a)
    if a.lint_only:
        backend = backends.get(cfg)  # each registry asked once, as launch.submit does
        trainer = trainers.get(cfg, backend)
        spec = launch.build(cfg, trainer=trainer, backend=backend)
        report = launch.lint(cfg, trainer=trainer, backend=backend, resume=a.resume, ignore_fit=a.ignore_fit)
        findings = [{**_jsonable(f), "fix": f.cli_fix} for f in report.findings]
        for f in findings:
            del f["cli_fix"]
        data = {"ok": report.ok, "submission_id": spec.submission_id, "entrypoint": spec.entrypoint,
                "checked": report.checked, "findings": findings}
        text = f"{report.text(cli=True)}\nsubmission id: {spec.submission_id}\nentrypoint: {spec.pretty()}"
        return Out(data, text, code=0 if report.ok else 1, error=None if report.ok else "launch refused by lint",
                   fix="apply each blocking finding's fix (listed above), then launch")
    from nbtools.cli._supervise import supervised_launch

    out = supervised_launch(a, cfg)
    if out is not None:
        return out
    job = launch.submit(cfg, resume=a.resume, ignore_fit=a.ignore_fit)
    status = launch.follow(cfg, job, timeout=a.timeout) if a.follow else job.status()
    data = {"submission_id": job.id, "status": _jsonable(status), "reattached": job.reattached,
            "dashboard_url": job.address, "entrypoint": job.entrypoint}
    return Out(data, f"{'re-attached to' if job.reattached else 'submitted'} {job.id} at {job.address}: "
               f"{data['status']}\nfollow: nbtools jobs logs {a.experiment} --id {job.id}")


def cmd_jobs(a) -> Out:
    from nbtools import jobs

    cfg = load_cfg(a)
    if a.action == "list":
        df = jobs.list_jobs(cfg.dashboard_url)
        return Out({"dashboard_url": cfg.dashboard_url, "jobs": _records(df)},
                   df.to_string(index=False) if len(df) else f"no jobs on {cfg.dashboard_url}")
    job = jobs.attach(cfg.dashboard_url, a.id or cfg.submission_id)
    if a.action == "logs":
        text = job.logs()
        return Out({"submission_id": job.id, "logs": text}, text)
    if a.action == "stop":
        job.stop(timeout=a.timeout)
    info = job.info()
    data = {"submission_id": job.id, "status": _jsonable(info.status), "message": info.message or "",
            "entrypoint": info.entrypoint, "dashboard_url": job.address}
    return Out(data, f"{job.id}: {data['status']}" + (f" ({data['message']})" if data["message"] else ""))


TRAJECTORY_ROW = ["step", "idx", "prompt", "response", "reward", "generation_length"]


def cmd_trajectories(a) -> Out:
    from nbtools import trajectories
    from nbtools.cli._kinds import resolve

    run = trajectories.open_run(resolve(a.run, want="logs", flag="RUN", command="trajectories").path)
    if getattr(a, "browse", False):
        return _browse(run, a.step)
    counts = run.read(columns=["step"])  # the whole run (column cache): records and skipped lines
    data: dict[str, Any] = {"steps": run.steps, "records": int(len(counts)), "skipped_lines": int(run.skipped)}
    text = f"{run.path}: {len(run.steps)} steps, {data['records']} records, {data['skipped_lines']} skipped lines"
    if len(run.segments) > 1:  # a resumed run (issue 16): which exp dirs, which steps two attempts wrote
        data.update(segments=run.segments, overlap_steps=run.overlap["train"])
        text += (f"\nresumed run: {' + '.join(run.segments)}; steps written twice (newest shown): "
                 f"{', '.join(map(str, data['overlap_steps'])) or 'none'}")
    if a.step is not None:
        df = run.read(a.step, columns=TRAJECTORY_ROW)
        data["rows"] = _records(df)
        text += f"\nstep {a.step}: {len(df)} records\n" + df.drop(columns="prompt").to_string(index=False, max_colwidth=60)
    return Out(data, text)


def _browse(run, step: int | None) -> Out:
    """The terminal viewer (``nbtools.explorer.browse``); refused where there is no terminal to draw on."""
    import sys

    from nbtools import explorer
    from nbtools.errors import ConfigError

    if not (sys.__stdin__ and sys.__stdin__.isatty() and sys.__stderr__ and sys.__stderr__.isatty()):
        raise ConfigError("--browse needs a terminal (stdin and stderr are not one here)",
                          fix="run it in an interactive shell (ssh -t …), or use --step N / --json in scripts")
    if not run.steps:
        raise ConfigError(f"{run.path} has no train_data_step*.jsonl yet",
                          fix="wait for the run's first step (nbtools jobs status EXPERIMENT.yaml shows its progress)")
    explorer.browse(run, step=step)
    return Out({"browsed": str(run.path)}, f"closed the viewer on {run.path}")


def cmd_checkpoints(a) -> Out:
    from nbtools import checkpoints
    from nbtools.cli._kinds import resolve

    where = resolve(a.checkpoint_dir, want="checkpoints", flag="CHECKPOINT_DIR", command="checkpoints").path
    df = checkpoints.list_checkpoints(where)
    return Out({"checkpoint_dir": str(where), "checkpoints": _records(df)},
               df.to_string(index=False) if len(df) else f"no step_N checkpoints in {where} yet")


def _existing(p: str, flag: str, *, kind: str, fix: str):
    """What is at ``p`` (a path or a URL: ``storage.Entry``), or a NotFoundError naming the flag/argument (the
    library would look elsewhere, e.g. the Hub)."""
    from nbtools import storage
    from nbtools.errors import NotFoundError

    found = storage.info(p)
    if found is None:
        raise NotFoundError(f"{flag} {p}: no such file or directory", fix=fix)
    if kind == "dir" and not found.is_dir:
        raise NotFoundError(f"{flag} {p}: is a file, not a directory", fix=fix)
    if kind == "file" and found.is_dir:
        raise NotFoundError(f"{flag} {p}: is a directory, not a file", fix=fix)
    return found


def _existing_path(p: str, flag: str, *, kind: str, fix: str) -> Path:
    """:func:`_existing` for an argument that must be on this machine (what the merge writes or reads in place)."""
    _existing(str(Path(p).expanduser()), flag, kind=kind, fix=fix)
    return Path(p).expanduser()


def cmd_merge(a) -> Out:
    """A step dir on this machine or in a bucket (``gs://…``: its files are copied to the local cache first), merged
    here into OUT_DIR; or, with ``--in-cluster EXPERIMENT.yaml``, merged by a Ray job where the checkpoint lives
    (STEP_DIR then a URL, the path the cluster sees, or the step's number; OUT_DIR as the cluster sees it, default
    ``merged_hf`` beside the checkpoints), as notebook 06 does."""
    from nbtools import storage
    from nbtools.cli._kinds import resolve
    from nbtools.errors import ConfigError, ConflictError, NotFoundError

    if a.in_cluster:
        return _merge_in_cluster(a)
    if a.out_dir is None:
        raise ConfigError("OUT_DIR is missing: the merge writes a HuggingFace directory on this machine",
                          fix="pass OUT_DIR, or --in-cluster EXPERIMENT.yaml to merge where the checkpoint lives")
    if storage.is_remote(a.out_dir):
        raise ConfigError(f"OUT_DIR {a.out_dir}: a merge on this machine writes a local directory",
                          fix="pass a local OUT_DIR, or --in-cluster EXPERIMENT.yaml to merge in the cluster and write "
                              "beside the checkpoints in the bucket")
    resolve(a.step_dir, want="step", flag="STEP_DIR", command="merge")  # a run or checkpoint dir: which step to pass
    fix = "pass a step_N directory (a path or gs://…); `nbtools checkpoints CHECKPOINT_DIR` lists them"
    if storage.is_remote(a.step_dir):
        _existing(a.step_dir, "STEP_DIR", kind="dir", fix=fix)
        print(f"copying {a.step_dir} to the local cache (only files not already there)", file=sys.stderr)
        step_dir = storage.mirror(a.step_dir)
    else:
        step_dir = _existing_path(a.step_dir, "STEP_DIR", kind="dir", fix=fix)
    if a.config is not None:
        cfg = _existing_path(a.config, "--config", kind="any",
                             fix="pass the base model's local directory or its config.json (the CLI does not "
                             "download from the Hub); omit --config to use the checkpoint's own")
        if cfg.is_dir() and not (cfg / "config.json").is_file():
            raise NotFoundError(f"--config {a.config}: the directory has no config.json",
                                fix="pass the base model's directory (the one holding config.json) or the file itself")
    if Path(a.out_dir).expanduser().exists() and not Path(a.out_dir).expanduser().is_dir():
        raise ConflictError(f"OUT_DIR {a.out_dir} is a file", fix="pass a directory path for OUT_DIR")
    from nbtools import checkpoints  # torch: imported once the arguments are known to be usable

    r = checkpoints.merge(step_dir, a.out_dir, config=a.config, overwrite=a.overwrite, progress=sys.stderr.isatty())
    data = {"step": str(a.step_dir), "out": str(r.out), "tensors": r.tensors, "bytes": r.bytes, "seconds": r.seconds,
            "layout": r.layout, "verified": bool(r.verified), "in_cluster": False}
    state = "reused (already merged and verified)" if r.reused else f"merged in {r.seconds:.1f} s"
    return Out(data, f"{state}: {r.tensors} tensors, {r.bytes / 1e6:.1f} MB, layout {r.layout}, verified "
               f"{r.verified} -> {r.out}")


def _merge_in_cluster(a) -> Out:
    from nbtools import checkpoints, config

    cfg = config.load(a.in_cluster)
    step = checkpoints.at_step(cfg, int(a.step_dir)) if a.step_dir.isdigit() else a.step_dir
    r = checkpoints.merge_in_cluster(cfg, str(step), out=a.out_dir, overwrite=a.overwrite,
                                     progress=sys.stderr.isatty())
    data = {"step": str(step), "out": str(r.out), "url": str(r.url), "tensors": r.tensors, "bytes": r.bytes,
            "seconds": r.seconds, "layout": r.layout, "verified": bool(r.verified), "in_cluster": True}
    state = "reused (already merged and verified)" if r.reused else f"merged in {r.seconds:.1f} s by a Ray job"
    return Out(data, f"{state}: {r.tensors} tensors, {r.bytes / 1e6:.1f} MB, layout {r.layout}, verified "
               f"{r.verified} -> {r.out} (read here at {r.url})")


def _block(b) -> dict:
    return {**b.to_dict(), "correct": b.numerator, "total": b.denominator, "accuracy": b.accuracy}


def _read_log(path: str, what: str = "LOGFILE") -> str:
    from nbtools import storage

    found = _existing(path, what, kind="file",
                      fix="save the eval job's log first, e.g. `nbtools jobs logs EXPERIMENT.yaml --id ID > eval.log`")
    return storage.fetch(path, entry=found).read_text(errors="replace")


def cmd_eval_parse(a) -> Out:
    from nbtools import evals
    from nbtools.errors import NotFoundError

    log = evals.read_score_log(_read_log(a.logfile))
    pending = f"a score block at line {log.pending_line} is still being written (the job is running)" \
        if log.pending_line else None
    if not log.blocks and not log.problems:
        raise NotFoundError(f"expected NeMo-RL score blocks (model_name=… dataset_name=… / score=0.4020 (201/500)) "
                            f"in {a.logfile}, found none" + (f"; {pending}" if pending else ""),
                            fix="pass the complete log of a finished run_eval.py job (check its status with "
                            "`nbtools jobs status EXPERIMENT.yaml --id ID`)")
    lines = [f"{b.model_name} on {b.dataset_name}: {b.metric} = {b.score:.4f} ({b.numerator:g}/{b.denominator}), "
             f"n={b.num_tests_per_prompt}, T={b.temperature} (line {b.line})" for b in log.blocks]
    lines += [f"note: {pending}"] if pending else []
    lines += [f"problem: {p}" for p in log.problems]
    data = {"blocks": [_block(b) for b in log.blocks], "problems": log.problems, "pending_line": log.pending_line}
    if log.problems:
        return Out(data, "\n".join(lines), code=1,
                   error=f"{len(log.problems)} score block(s) cannot be right (listed above; the valid ones are kept)",
                   fix="pass the raw log printed by NeMo-RL's run_eval.py")
    return Out(data, "\n".join(lines))


_TOTALS = re.compile(r"^(\d+(?:\.\d+)?)/(\d+)$")
_TABLES = {".csv": "read_csv", ".parquet": "read_parquet", ".jsonl": "read_json"}


def _evaluation(arg: str):
    """A compare operand for ``evals.compare``: results dir, evaluation_data.json, results table, log, or S/T."""
    from nbtools.errors import NbtoolsError

    try:
        return _load_operand(arg)
    except NbtoolsError:
        raise
    except (ValueError, OSError, KeyError, TypeError) as e:  # pandas/pyarrow/json on a damaged file
        raise NbtoolsError(f"{arg}: cannot read it as an evaluation ({type(e).__name__}: {str(e)[:300]})",
                           fix="pass a results dir, evaluation_data.json, a per-problem .csv/.parquet/.jsonl with "
                           "problem_id and correct columns, a run_eval.py log or totals like 201/500") from None


def _load_operand(arg: str):
    import pandas as pd

    from nbtools import evals, storage
    from nbtools.errors import NotFoundError

    path, _, which = arg.partition("#")  # LOG#2: the second score block of a log
    found = storage.info(path) if path else None  # a path or a URL (gs://…), read the same way
    p = path
    if found is not None and found.is_dir:
        results = storage.info(storage.join(path, "results.parquet"))
        return path if results is not None and not results.is_dir else evals.load_evaluation_data(path)
    if found is not None:
        name = storage.name_of(path)
        suffix = os.path.splitext(name)[1]
        if name == "evaluation_data.json":
            return evals.load_evaluation_data(path)
        if suffix in _TABLES:
            local = storage.fetch(path, entry=found)
            return getattr(pd, _TABLES[suffix])(local, **({"lines": True} if suffix == ".jsonl" else {}))
        blocks = evals.parse_score_blocks(_read_log(path, "A/B"))
        if not blocks:
            raise NotFoundError(f"{p} holds no per-problem table and no NeMo-RL score block",
                                fix="pass a results dir (EvalResult.save), evaluation_data.json, a .csv/.parquet/"
                                ".jsonl with problem_id and correct columns, or a run_eval.py log")
        if which and not (which.isdigit() and 1 <= int(which) <= len(blocks)):
            raise NotFoundError(f"{arg!r}: {p} holds {len(blocks)} score block(s), so #{which} does not exist",
                                fix=f"use #1 … #{len(blocks)} (or no #N for the last block)")
        return blocks[int(which) - 1 if which else -1]
    if m := _TOTALS.match(arg):
        return float(m.group(1)), int(m.group(2))
    raise NotFoundError(f"expected an evaluation at {arg!r}, found no such file or directory",
                        fix="pass a results dir, evaluation_data.json, a per-problem .csv/.parquet/.jsonl, a "
                        "run_eval.py log (LOG#N for its N-th block) or totals like 201/500")


def cmd_compare(a) -> Out:
    import warnings

    from nbtools import evals
    from nbtools.errors import ConfigError

    if not 0 < a.alpha < 1:  # named as the flag the user typed (the library names its argument)
        raise ConfigError(f"--alpha {a.alpha:g} is not a significance level; allowed: a number strictly between 0 and 1; "
                          "fix: e.g. --alpha 0.05")
    with warnings.catch_warnings():  # mismatches are in c.notes, printed below: no second copy from warnings
        warnings.simplefilter("ignore", UserWarning)
        c = evals.compare(_evaluation(a.a), _evaluation(a.b), names=tuple(a.names), alpha=a.alpha,
                          allow_mismatch=a.allow_mismatch)
    ci = f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]" if c.ci_low is not None else "n/a"
    text = "\n".join([
        f"{c.name_a:<12} accuracy {c.acc_a:.3f}  95% CI [{c.ci_a[0]:.3f}, {c.ci_a[1]:.3f}]",
        f"{c.name_b:<12} accuracy {c.acc_b:.3f}  95% CI [{c.ci_b[0]:.3f}, {c.ci_b[1]:.3f}]",
        f"delta {c.delta:+.3f}  95% CI {ci}  test: {c.test} ({'paired' if c.paired else 'unpaired'})  "
        f"p = {c.p_value:.3g}  on {c.n_problems} problems",
        *[f"note: {n}" for n in c.notes], c.verdict])
    for n in c.notes:
        if n.startswith("MISMATCH"):
            print(f"warning: {n}", file=sys.stderr)
    return Out(c.to_dict(), text)


def cmd_demo(a) -> Out:
    from nbtools import demo

    if a.notebooks_dir is not None:
        _existing_path(a.notebooks_dir, "--notebooks-dir", kind="dir",
                       fix="pass the directory holding the NN_*.ipynb notebooks (default: the project's notebooks/)")
    if a.out is not None and Path(a.out).expanduser().exists() and not Path(a.out).expanduser().is_dir():
        from nbtools.errors import ConflictError

        raise ConflictError(f"--out {a.out} is a file", fix="pass a directory for --out (created when missing)")

    r = demo.run_demo(out_dir=a.out, only=a.only, notebooks_dir=a.notebooks_dir, timeout=a.timeout)
    data = {"ok": r.ok, "out_dir": str(r.out_dir), "timings": r.timings, "failed": r.failed, "error": r.error}
    return Out(data, r.summary(), code=0 if r.ok else 1, error=None if r.ok else f"{r.failed} failed: {r.error}",
               fix=f"open the executed copy under {r.out_dir}/notebooks to see the failing cell")
