"""Plan and Step: ordered, idempotent provisioning steps (check -> command), shown, scripted or applied."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nbtools.errors import NbtoolsError

__all__ = ["Step", "Plan", "StepFailedError", "VARIABLE"]

# ${NAME} inside an argument: a value looked up once at apply time (e.g. the project number).
VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


class StepFailedError(NbtoolsError, RuntimeError):
    """A plan step's command exited non-zero; the plan stopped there and resumes from it on the next apply."""

    def __init__(self, step: str, command: str, returncode: int, stderr: str, *, fix: str):
        self.step, self.command, self.returncode, self.stderr = step, command, returncode, stderr
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        super().__init__(f"step {step!r} failed (exit {returncode}): {command}\n--- stderr ---\n{tail}", fix=fix)


@dataclass(frozen=True)
class Step:
    """One provisioning action: the exact command, a check that says "already done", and its undo.

    ``check`` passes when it exits 0 and prints something (or, with ``expect``, prints every expected line).
    ``stdin`` is shown and fed to the command; ``make_stdin`` (if set) builds the real input at apply time,
    so secret values never enter the plan, its display, its script or its state file.
    """

    name: str
    what: str
    command: tuple[str, ...]
    check: tuple[str, ...] | None = None
    undo: tuple[str, ...] | None = None
    expect: tuple[str, ...] = ()
    stdin: str | None = None
    make_stdin: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    script: str | None = None  # bash for to_script() when the argv form cannot express it (a secret from env)
    absent: bool = False  # destroy steps: done when the check finds nothing

    @property
    def command_str(self) -> str:
        return _join(self.command) + (" <<'EOF'\n" + self.stdin.rstrip("\n") + "\nEOF" if self.stdin else "")


def _quote(arg: str) -> str:
    if not VARIABLE.search(arg):
        return shlex.quote(arg)
    # keep ${VAR} expandable in the script: double quotes, every other $ " \ ` escaped
    parts = VARIABLE.split(arg)  # literal, name, literal, name, ...
    out = []
    for i, part in enumerate(parts):
        out.append("${" + part + "}" if i % 2 else re.sub(r'([$"\\`])', r"\\\1", part))
    return '"' + "".join(out) + '"'


def _join(argv: tuple[str, ...] | None) -> str:
    return " ".join(_quote(a) for a in argv) if argv else ""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Plan:
    """An ordered list of steps for one experiment; ``apply`` records progress in a state file.

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
        df = self.show()
        note = f"<p><i>{self.note}</i></p>" if self.note else ""
        if not self.steps:
            return f"<b>{self.kind} plan</b>: no steps{note}"
        return f"<b>{self.kind} plan</b>: {len(df)} steps, state in <code>{self.state_path}</code>{note}" + df.to_html(index=False)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(f"no step {name!r}; steps: {', '.join(s.name for s in self.steps)}")

    def to_script(self) -> str:
        """A bash script that runs the plan idempotently: each step runs only when its check fails."""
        out = [
            "#!/usr/bin/env bash",
            f"# nbtools {self.kind} plan ({len(self.steps)} steps). Safe to re-run: finished steps are skipped.",
            "set -euo pipefail",
            "",
            "done_() {  # true when the check command succeeds and prints something (or every expected line)",
            '  local out; out="$("$@" 2>/dev/null)" || return 1; [[ -n "$out" ]] || return 1',
            '  for want in "${EXPECT[@]:-}"; do [[ -z "$want" || "$out" == *"$want"* ]] || return 1; done',
            "}",
        ]
        for name, cmd in self.variables.items():
            out.append(f'{name}="${{{name}:-$({_join(cmd)})}}"')
        for s in self.steps:
            out += ["", f"# --- {s.name}: {s.what}"]
            body = s.script or s.command_str
            exp = "EXPECT=(" + " ".join(_quote(e) for e in s.expect) + ")"
            if s.check:
                cond = f"{exp}; done_ {_join(s.check)}"
                if s.absent:
                    out.append(f"if ! ({cond}); then echo 'skip {s.name}: already gone'; else")
                else:
                    out.append(f"if {cond}; then echo 'skip {s.name}: already done'; else")
                out += [body, "fi"]  # not indented: a heredoc's EOF must start its line
            else:
                out.append(body)
        return "\n".join(out) + "\n"

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
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.to_script())
        tmp.chmod(0o755)
        tmp.replace(p)
        return p

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
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_path)

    def _invalidate(self, name: str) -> None:
        if self.invalidates is None or not self.invalidates.exists():
            return
        other = json.loads(self.invalidates.read_text())
        if other.get("steps", {}).pop(name, None) is not None:
            tmp = self.invalidates.with_name(self.invalidates.name + ".tmp")
            tmp.write_text(json.dumps(other, indent=1))
            tmp.replace(self.invalidates)

    def reset(self) -> None:
        """Forget recorded progress (the next apply re-checks every step)."""
        self.state_path.unlink(missing_ok=True)

    # -- running ------------------------------------------------------------------------------------------
    def _run(self, argv: tuple[str, ...], variables: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess:
        resolved = [VARIABLE.sub(lambda m: variables[m.group(1)], a) for a in argv]
        try:
            return subprocess.run(resolved, input=stdin, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return subprocess.CompletedProcess(resolved, 127, "", f"{resolved[0]}: command not found on PATH")

    def _is_done(self, s: Step, variables: dict[str, str]) -> bool:
        if not s.check:
            return False
        r = self._run(s.check, variables)
        expect = [VARIABLE.sub(lambda m: variables[m.group(1)], e) for e in s.expect]
        found = r.returncode == 0 and bool(r.stdout.strip()) and all(e in r.stdout for e in expect)
        return not found if s.absent else found

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

    def apply(self, *, dry_run: bool = True, progress: bool = True) -> pd.DataFrame:
        """Run the pending steps in order; stop at the first failure; resume there on the next call.

        Args:
            dry_run: True (default) runs nothing and returns what would run; False checks and runs steps.
            progress: show a tqdm bar.

        Returns:
            DataFrame with step, status ("done" | "already done" | "would run" | "skipped (done earlier)").

        Raises:
            StepFailedError: with the command's stderr; the state file remembers the steps before it.

        Example:
            >>> plan.apply()                # dry run: what would run
            >>> plan.apply(dry_run=False)   # for real; re-run after fixing a failure to continue
        """
        state = self._load()
        rows = []
        if not self.applicable:
            dry_run = True
        if dry_run:
            for s in self.steps:
                prev = state["steps"].get(s.name, {}).get("status")
                rows.append({"step": s.name, "status": "skipped (done earlier)" if prev == "done" else "would run",
                             "command": s.command_str})
            df = pd.DataFrame(rows, columns=["step", "status", "command"])
            df.attrs["note"] = self.note or ("dry run: nothing was run" if self.applicable else "")
            return df
        from tqdm.auto import tqdm

        needed = {m for s in self.steps for a in (*s.command, *(s.check or ()), *s.expect) for m in VARIABLE.findall(a)}
        variables = self._variables(state, needed)
        state["variables"] = {k: v for k, v in variables.items() if k in self.variables}  # never env secrets
        bar = tqdm(self.steps, desc=f"{self.kind} plan", unit="step", disable=not progress)
        try:
            for s in bar:
                bar.set_postfix_str(s.name)
                if state["steps"].get(s.name, {}).get("status") == "done":
                    rows.append({"step": s.name, "status": "skipped (done earlier)"})
                    continue
                if self._is_done(s, variables):
                    status = "already done"
                else:
                    stdin = s.make_stdin() if s.make_stdin else s.stdin
                    r = self._run(s.command, variables, stdin)
                    if r.returncode != 0:
                        state["steps"][s.name] = {"status": "failed", "at": _now(), "returncode": r.returncode,
                                                  "stderr": r.stderr[-4000:]}
                        self._save(state)
                        raise StepFailedError(
                            s.name, _join(s.command), r.returncode, r.stderr,
                            fix=f"fix the cause above, then run plan.apply(dry_run=False) again: it resumes at {s.name!r}",
                        )
                    status = "done"
                state["steps"][s.name] = {"status": "done", "at": _now()}
                self._save(state)
                self._invalidate(s.name)
                rows.append({"step": s.name, "status": status})
        finally:
            bar.close()
        return pd.DataFrame(rows)
