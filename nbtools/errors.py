"""Small typed error hierarchy: every message says what was expected, what was seen, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Fix",
    "NbtoolsError",
    "ConfigError",
    "NotFoundError",
    "NotReadyError",
    "JobFailedError",
    "DependencyError",
    "LintError",
    "CheckpointError",
    "ConflictError",
    "AccessDeniedError",
]


@dataclass(frozen=True)
class Fix:
    """The next action in both forms: ``python`` for a notebook, ``cli`` for a terminal (``nbtools`` flags).

    Why: a notebook user calls ``nbtools.backends.get(cfg).up()``; a terminal user runs ``nbtools up X.yaml
    --apply``. A fix that names no call or argument (``pip install gcsfs``) is a plain string: the same for both.

    Example:
        >>> Fix("nbtools.backends.get(cfg).up()", cli="`nbtools up EXPERIMENT.yaml --apply`")
    """

    python: str
    cli: str

    def __str__(self) -> str:
        return self.python


class NbtoolsError(Exception):
    """Base class; ``fix`` is the next action (Python form), ``cli_fix`` the same for the terminal."""

    def __init__(self, message: str, *, fix: Fix | str | None = None):
        self.what = message  # the message without the fix, for layers that print the fix their own way (the CLI)
        self.fix_forms = Fix(fix, cli=fix) if isinstance(fix, str) else fix  # both forms, as data
        self.fix = self.fix_forms.python if self.fix_forms else None
        super().__init__(f"{message}\n  fix: {self.fix}" if self.fix else message)

    @property
    def cli_fix(self) -> str | None:
        """The fix in the CLI's words (commands and flags)."""
        return self.fix_forms.cli if self.fix_forms else None


class ConfigError(NbtoolsError, ValueError):
    """The experiment config is invalid; `problems` lists every issue found at once.

    Each problem is ``what; fix: action`` (an action naming config keys, the same in a notebook and a terminal);
    ``fix=`` is for an error whose action differs between the two (a function argument vs a CLI flag).
    """

    def __init__(self, problems: list[str] | str, *, source: str | None = None, fix: Fix | str | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        NbtoolsError.__init__(self, f"{len(self.problems)} problem(s){where}:\n{lines}", fix=fix)

    @property
    def problem_fixes(self) -> list[str]:
        """The action each problem names after its ``; fix:`` (problems without one are left out)."""
        return [p.partition("; fix: ")[2] for p in self.problems if "; fix: " in p]


class NotFoundError(NbtoolsError, FileNotFoundError):
    """Something the user expects to exist (run, checkpoint, pod, job) does not."""


class NotReadyError(NbtoolsError, TimeoutError):
    """A wait ran out of time; carries the last observed state and its reasons (pod events, job message)."""

    def __init__(self, message: str, *, reason: str = "", events: list[str] | None = None, fix: Fix | str | None = None):
        self.reason = reason
        self.events = list(events or [])
        detail = message
        if reason:
            detail += f"\n  reason: {reason}"
        if self.events:
            detail += "\n  last events:\n" + "\n".join(f"    {e}" for e in self.events[-10:])
        super().__init__(detail, fix=fix)


class JobFailedError(NbtoolsError, RuntimeError):
    """A Ray job ended in FAILED/STOPPED; carries status, Ray's message and the log tail."""

    def __init__(self, job_id: str, status: str, message: str = "", log_tail: str = "", *, fix: Fix | str | None = None):
        self.job_id, self.status, self.message, self.log_tail = job_id, status, message, log_tail
        text = f"job {job_id!r} ended {status}"
        if message:
            text += f": {message}"
        if log_tail:
            text += "\n--- last log lines ---\n" + log_tail.rstrip()
        super().__init__(text, fix=fix or Fix(f"read the full log with nbtools.jobs.logs({job_id!r}); fix the cause and re-run",
                                              cli=f"read the full log: `nbtools jobs logs EXPERIMENT.yaml --id {job_id}`; "
                                                  "fix the cause and re-run"))


class DependencyError(NbtoolsError, ImportError):
    """An optional dependency or external tool is missing."""


class LintError(NbtoolsError, ValueError):
    """A launch was refused because lint found blocking problems."""

    def __init__(self, findings: list, *, fix: Fix | str | None = None):
        self.findings = list(findings)
        lines = "\n".join(f"  - {f}" for f in self.findings)
        super().__init__(f"launch refused, {len(self.findings)} blocking finding(s):\n{lines}", fix=fix)


class CheckpointError(NbtoolsError, ValueError):
    """A checkpoint is missing, truncated, inconsistent or in a layout that cannot be merged here."""


class ConflictError(NbtoolsError, FileExistsError):
    """An operation would overwrite or duplicate something that already exists."""


class AccessDeniedError(NbtoolsError, PermissionError):
    """A file, directory or bucket exists but these credentials or permissions may not read (or write) it."""
