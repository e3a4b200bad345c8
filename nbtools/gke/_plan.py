"""Plan: ordered, idempotent provisioning steps (``_step.Step``: check -> command), shown, scripted or applied."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nbtools import _atomic, _paths
from nbtools._escape import html as _h
from nbtools.errors import Fix, NbtoolsError, NotFoundError
from nbtools.gke._script import render
from nbtools.gke._step import VARIABLE, Step, _join

__all__ = ["Plan", "StepFailedError", "PlanIncompleteError"]

class StepFailedError(NbtoolsError, RuntimeError):
    """A plan step's command exited non-zero; the plan stopped there and resumes from it on the next apply."""

    def __init__(self, step: str, command: str, returncode: int, stderr: str, *, fix: Fix | str):
        self.step, self.command, self.returncode, self.stderr = step, command, returncode, stderr
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        super().__init__(f"step {step!r} failed (exit {returncode}): {command}\n--- stderr ---\n{tail}", fix=fix)


class PlanIncompleteError(NbtoolsError, RuntimeError):
    """A keep-going plan (destroy) ran every step it could, but some failed or some resource is still there.

    ``results`` has one row per step (status, and ``now``: the resource's state after the run); ``remaining`` lists
    what the final check found still there (or could not check).
    """

    def __init__(self, results: pd.DataFrame, remaining: pd.DataFrame, *, fix: Fix | str):
        self.results, self.remaining = results, remaining
        failed = results[results["status"].str.startswith(("failed", "skipped (needs"))]
        lines = [f"  - {r.step}: {r.status}" for r in failed.itertuples()]
        lines += [f"  - still there: {r.step} ({r.what}): {r.state}" for r in remaining.itertuples()]
        super().__init__(f"{len(failed)} step(s) did not complete; {len(remaining)} resource(s) not confirmed gone:\n"
                         + "\n".join(lines), fix=fix)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@_paths.tidy_reprs
@dataclass
class Plan:
    """An ordered list of steps for one experiment; ``apply`` records progress in a state file.

    A provisioning plan stops at its first failure (later steps need the earlier ones). A ``keep_going`` plan (the
    destroy plan) runs every step whose ``after`` steps did not fail, then checks what is still there.

    Example:
        >>> plan = nbtools.gke.plan(cfg)
        >>> plan.show()                 # every command, its check and its undo
        >>> plan.apply(dry_run=False)   # runs pending steps; re-running resumes where it stopped
    """

    kind: str
    steps: list[Step]
    state_path: Path
    variables: dict[str, tuple[str, ...]] = field(default_factory=dict)  # NAME -> command printing its value
    invalidates: Path | None = None  # the opposite plan's state: a step done here is no longer done there
    keep_going: bool = False  # destroy: a failed step does not stop the steps that do not need it
    fix: Fix | str = ""  # keep-going plans: what to do when something is still there
    applicable: bool = True  # False: shown for reference only; apply() never runs anything
    note: str = ""  # why the plan is empty or not applicable (shown with it)

    @classmethod
    def empty(cls, kind: str, note: str) -> Plan:
        """A plan with no steps (nothing to provision or destroy on this backend), saying why."""
        return cls(kind, [], Path("/dev/null"), applicable=False, note=note)

    # -- display ------------------------------------------------------------------------------------------
    def show(self) -> pd.DataFrame:
        """One row per step: name, what it does, command, check, undo, and its recorded status."""
        state = self._load()["steps"]
        rows = [
            {
                "step": s.name,
                "what": s.what,
                "command": s.command_str,
                "check": (("absent: " if s.absent else "") + _join(s.check)) if s.check else "",
                "undo": _join(s.undo),
                "status": state.get(s.name, {}).get("status", "pending"),
            }
            for s in self.steps
        ]
        return pd.DataFrame(rows, columns=["step", "what", "command", "check", "undo", "status"])

    to_frame = show  # the same table, for code that wants data rather than display

    def _repr_html_(self) -> str:
        """Like ``kubectl get``: STATUS first, left-aligned, one step per row; the command in full (a heredoc's YAML
        folded under it), the check and the undo folded; inline styles only (they survive JupyterLab's sanitiser)."""
        note = f"<p><i>{_h(self.note)}</i></p>" if self.note else ""
        if not self.steps:
            return f"<b>{_h(self.kind)} plan</b>: no steps{note}"
        state = self._load()["steps"]
        unset = "pending" if self.applicable else "would run"  # a plan only shown (local / ray) never runs
        counts: dict[str, int] = {}
        for s in self.steps:
            st = state.get(s.name, {}).get("status", unset)
            counts[st] = counts.get(st, 0) + 1
        cell = "style='text-align:left;vertical-align:top;padding:2px 8px'"
        code = "style='white-space:pre-wrap;word-break:break-all;font-size:90%'"

        def fold(summary: str, body: str) -> str:
            return (f"<details><summary style='cursor:pointer;color:#555'>{_h(summary)}</summary>"
                    f"<pre {code}>{_h(body)}</pre></details>")

        rows = []
        for s in self.steps:
            st = state.get(s.name, {}).get("status", unset)
            color = {"done": "#2e7d32", "failed": "#c62828", "pending": "#555"}.get(st, "#555")
            extra = fold(f"stdin: {len(s.stdin.splitlines())} lines of YAML", s.stdin) if s.stdin else ""
            if s.check:
                extra += fold("check" + (" (done when absent)" if s.absent else ""), _join(s.check))
            if s.undo:
                extra += fold("undo", _join(s.undo))
            rows.append(f"<tr><td {cell}><b style='color:{color}'>{_h(st)}</b></td>"
                        f"<td {cell}><code>{_h(s.name)}</code></td><td {cell}>{_h(s.what)}</td>"
                        f"<td {cell}><code {code}>{_h(_join(s.command))}</code>{extra}</td></tr>")
        head = "".join(f"<th {cell}>{h}</th>" for h in ("STATUS", "STEP", "WHAT", "COMMAND"))
        summary = ", ".join(f"{n} {st}" for st, n in counts.items())
        return (f"<b>{_h(self.kind)} plan</b>: {len(self.steps)} steps ({summary}); state in "
                f"<code>{_h(str(self.state_path))}</code>{note}"
                f"<table style='border-collapse:collapse'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(f"no step {name!r}; steps: {', '.join(s.name for s in self.steps)}")

    def _get(self, name: str | None) -> Step | None:
        return next((s for s in self.steps if s.name == name), None) if name else None

    def to_script(self) -> str:
        """A bash script that runs the plan idempotently: each step runs only when its check does not pass.

        A keep-going plan's script goes on past a failed step (skipping the steps that need it) and ends with the
        list of what is still there; it exits non-zero when anything failed or remains.
        """
        return render(self.kind, self.steps, variables=self.variables, keep_going=self.keep_going)

    def argvs(self) -> list[tuple[str, ...]]:
        """Every argv the plan can run: each step's command, check and undo, and the variable look-ups."""
        return [a for s in self.steps for a in (s.command, s.check, s.undo) if a] + list(self.variables.values())

    def validate(self, *, source: str = "auto") -> pd.DataFrame:
        """Every gcloud flag of every command, check and undo, looked up in gcloud's own ``--help``.

        The installed gcloud answers when there is one on PATH; without it, the flag table shipped in the package
        (``nbtools/data/gcloud_flags_<version>.json``) does. The ``source`` column and ``attrs["source"]`` say which.

        Example:
            >>> report = plan.validate()
            >>> report.attrs["source"], report[~report.ok]      # the second is empty when every flag exists
        """
        from nbtools.gke._flags import validate_flags

        return validate_flags(self.argvs(), source=source)

    def write_script(self, path: str | os.PathLike) -> Path:
        """Write ``to_script()`` atomically (temp file + rename), executable; returns the path.

        Example:
            >>> plan.write_script(cfg.run_dir / "gke" / "provision.sh")
        """
        return _atomic.write_text(path, self.to_script(), mode=0o755)

    # -- state --------------------------------------------------------------------------------------------
    def _load(self) -> dict:
        try:
            data = json.loads(self.state_path.read_text())
            if data.get("kind") == self.kind:
                return data
        except (OSError, ValueError):
            pass
        return {"kind": self.kind, "steps": {}, "variables": {}}

    def _save(self, data: dict) -> None:
        _atomic.write_json(self.state_path, data, indent=1)

    def _invalidate(self, names: tuple[str, ...]) -> None:
        if self.invalidates is None or not self.invalidates.exists():
            return
        other = json.loads(self.invalidates.read_text())
        dropped = [other.get("steps", {}).pop(n, None) for n in names]
        if any(d is not None for d in dropped):
            _atomic.write_json(self.invalidates, other, indent=1)

    def reset(self) -> None:
        """Forget recorded progress (the next apply re-checks every step)."""
        self.state_path.unlink(missing_ok=True)

    # -- checks -------------------------------------------------------------------------------------------
    def _run(self, argv: tuple[str, ...], variables: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess:
        resolved = [VARIABLE.sub(lambda m: variables[m.group(1)], a) for a in argv]
        try:
            return subprocess.run(resolved, input=stdin, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return subprocess.CompletedProcess(resolved, 127, "", f"{resolved[0]}: command not found on PATH")

    def _observe(self, s: Step, variables: dict[str, str]) -> tuple[bool | None, str]:
        """(is the resource there?, what the check printed); None when the check itself failed (auth, network)."""
        if not s.check:
            return None, ""
        r = self._run(s.check, variables)
        if r.returncode != 0:
            return None, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        out = r.stdout.strip()
        expect = [VARIABLE.sub(lambda m: variables[m.group(1)], e) for e in s.expect]
        there = bool(out) and all(e in out for e in expect)
        if there and s.states and not s.absent:
            there = out in s.states
        return there, out

    def _is_done(self, s: Step, variables: dict[str, str], cache: dict | None = None) -> tuple[bool, str]:
        """(done?, what the check saw). Absent steps are done when their parent (``within``) is gone, too."""
        cache = {} if cache is None else cache

        def observe(step: Step) -> tuple[bool | None, str]:
            if step.name not in cache:
                cache[step.name] = self._observe(step, variables)
            return cache[step.name]

        if s.absent:
            parent = self._get(s.within)
            if parent is not None and observe(parent)[0] is False:
                return True, f"gone with {parent.name}"
            there, seen = observe(s)
            return there is False, seen
        there, seen = observe(s)
        return bool(there), seen

    def remaining(self, *, variables: dict[str, str] | None = None) -> pd.DataFrame:
        """Each step's resource as its check sees it now: "gone", "still there" or "unknown: <why>".

        Example:
            >>> nbtools.gke.destroy_plan(cfg).remaining()   # after a destroy: what still costs money
        """
        if variables is None:
            needed = {m for s in self.steps for a in (*(s.check or ()), *s.expect) for m in VARIABLE.findall(a)}
            variables = self._variables(self._load(), needed)
        cache: dict = {}
        rows = []
        for s in self.steps:
            if not s.check:
                continue
            done, seen = self._is_done(s, variables, cache)
            there = cache.get(s.name, (None, seen))[0]
            if s.absent:
                state = "gone" if done else ("still there" if there else f"unknown: {seen}")
            else:
                state = "there" if done else ("missing" if there is False else f"unknown: {seen}")
            rows.append({"step": s.name, "what": s.what, "state": state, "check": _join(s.check)})
        return pd.DataFrame(rows, columns=["step", "what", "state", "check"])

    def _variables(self, state: dict, needed: set[str]) -> dict[str, str]:
        values = dict(state.get("variables", {}))
        for name in sorted(needed - set(values)):
            env = os.environ.get(name)
            if env:
                values[name] = env
                continue
            r = self._run(self.variables[name], {})
            if r.returncode != 0 or not r.stdout.strip():
                raise StepFailedError(
                    f"lookup ${name}", _join(self.variables[name]), r.returncode, r.stderr,
                    fix=f"make the lookup work (gcloud auth login; gcloud config set project ...) or export {name}",
                )
            values[name] = r.stdout.strip()
        return values

    # -- running ------------------------------------------------------------------------------------------
    def apply(self, *, dry_run: bool = True, progress: bool = True) -> pd.DataFrame:
        """Check every step against the live state and run the ones that are not done, in order.

        Every real apply re-runs each step's check (a node pool recorded as created may since have gone to
        ``ERROR``); the state file records what ran. A provisioning plan stops at the first failure and, re-applied,
        goes on from there. A keep-going plan (destroy) continues past a failure with every step that does not need
        the failed one, then checks what is still there.

        Args:
            dry_run: True (default) runs nothing and returns what would run; False checks and runs steps.
            progress: show a tqdm bar.

        Returns:
            DataFrame with step and status ("done" | "already done" | "updated" | "kept ..." | "would run" |
            "skipped (done earlier)"); a keep-going plan adds ``now``, each resource's state after the run.

        Raises:
            StepFailedError: a provisioning step failed; its stderr is in the message.
            PlanIncompleteError: a keep-going plan ended with failures or resources still there.

        Example:
            >>> plan.apply()                # dry run: what would run
            >>> plan.apply(dry_run=False)   # for real; re-run after fixing a failure to continue
        """
        state = self._load()
        if not self.applicable:
            dry_run = True
        if dry_run:
            rows = []
            for s in self.steps:
                prev = state["steps"].get(s.name, {}).get("status")
                rows.append({"step": s.name, "status": "skipped (done earlier)" if prev == "done" else "would run",
                             "command": s.command_str})
            df = pd.DataFrame(rows, columns=["step", "status", "command"])
            df.attrs["note"] = self.note or ("dry run: nothing was run" if self.applicable else "")
            df.attrs["dry_run"], df.attrs["applicable"] = True, self.applicable
            return df
        from nbtools._progress import tqdm

        needed = {m for s in self.steps for a in (*s.command, *(s.check or ()), *s.expect) for m in VARIABLE.findall(a)}
        variables = self._variables(state, needed)
        state["variables"] = {k: v for k, v in variables.items() if k in self.variables}  # never env secrets
        rows: list[dict] = []
        failed: dict[str, str] = {}  # step -> why (failed or skipped because a step it needs failed)
        bar = tqdm(self.steps, desc=f"{self.kind} plan", unit="step", disable=not progress)
        try:
            for s in bar:
                bar.set_postfix_str(s.name)
                needs = [a for a in s.after if a in failed]
                if self.keep_going and needs:
                    failed[s.name] = f"skipped (needs {', '.join(needs)}, which did not complete)"
                    rows.append({"step": s.name, "status": failed[s.name]})
                    continue
                status = self._apply_step(s, variables, state)
                if status.startswith("failed") and s.keep_if_refused:
                    status = "kept: " + status.removeprefix("failed ") + (f"; {s.hint}" if s.hint else "")
                if status.startswith("failed"):
                    failed[s.name] = status
                rows.append({"step": s.name, "status": status})
        finally:
            bar.close()
        out = pd.DataFrame(rows)
        out.attrs["dry_run"], out.attrs["applicable"] = False, True
        if not self.keep_going:
            return out
        left = self.remaining(variables=variables)
        now = dict(zip(left["step"], left["state"], strict=True))
        out["now"] = [now.get(n, "") for n in out["step"]]
        kept = {r["step"] for r in rows if r["status"].startswith("kept:")}
        remaining = left[(left["state"] != "gone") & ~left["step"].isin(kept)]
        out.attrs["kept"] = sorted(kept)
        if failed or not remaining.empty:
            raise PlanIncompleteError(out, remaining.reset_index(drop=True), fix=self.fix or "fix the causes above and re-apply")
        return out

    def _apply_step(self, s: Step, variables: dict[str, str], state: dict) -> str:
        done, seen = self._is_done(s, variables)
        if done and not s.refresh:
            status = "already gone" if s.absent else "already done"
        else:
            try:
                stdin = s.make_stdin() if s.make_stdin else s.stdin
            except NotFoundError:
                if done:  # the resource exists, but no new value is at hand: keep it as it is
                    state["steps"][s.name] = {"status": "done", "at": _now()}
                    self._save(state)
                    return "kept (no new value in the environment)"
                raise
            r = self._run(s.command, variables, stdin)
            if r.returncode != 0:
                state["steps"][s.name] = {"status": "failed", "at": _now(), "returncode": r.returncode,
                                          "stderr": r.stderr[-4000:]}
                self._save(state)
                if self.keep_going:
                    return f"failed (exit {r.returncode}): {(r.stderr.strip().splitlines() or [''])[-1][:200]}"
                fix = Fix(f"fix the cause above, then run plan.apply(dry_run=False) again: it resumes at {s.name!r}",
                          cli=f"fix the cause above, then apply again (notebook 01, or the script of `nbtools plan "
                              f"EXPERIMENT.yaml --script`): it resumes at {s.name!r}")
                if s.hint and seen and not s.absent:
                    fix = f"the check found {seen!r}: {s.hint}"
                raise StepFailedError(s.name, _join(s.command), r.returncode, r.stderr, fix=fix)
            status = "updated" if done else "done"
        state["steps"][s.name] = {"status": "done", "at": _now()}
        self._save(state)
        self._invalidate((s.name, *s.invalidates))
        return status
