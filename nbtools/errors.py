"""Small typed error hierarchy: every message says what was expected, what was seen, and the fix."""

from __future__ import annotations

__all__ = [
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


class NbtoolsError(Exception):
    """Base class; `fix` is the next action the user should take."""

    def __init__(self, message: str, *, fix: str | None = None):
        self.fix = fix
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)


class ConfigError(NbtoolsError, ValueError):
    """The experiment config is invalid; `problems` lists every issue found at once."""

    def __init__(self, problems: list[str] | str, *, source: str | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        NbtoolsError.__init__(self, f"{len(self.problems)} problem(s){where}:\n{lines}")


class NotFoundError(NbtoolsError, FileNotFoundError):
    """Something the user expects to exist (run, checkpoint, pod, job) does not."""


class NotReadyError(NbtoolsError, TimeoutError):
    """A wait ran out of time; carries the last observed state and its reasons (pod events, job message)."""

    def __init__(self, message: str, *, reason: str = "", events: list[str] | None = None, fix: str | None = None):
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

    def __init__(self, job_id: str, status: str, message: str = "", log_tail: str = "", *, fix: str | None = None):
        self.job_id, self.status, self.message, self.log_tail = job_id, status, message, log_tail
        text = f"job {job_id!r} ended {status}"
        if message:
            text += f": {message}"
        if log_tail:
            text += "\n--- last log lines ---\n" + log_tail.rstrip()
        super().__init__(text, fix=fix or f"read the full log with nbtools.jobs.logs({job_id!r}); fix the cause and re-run")


class DependencyError(NbtoolsError, ImportError):
    """An optional dependency or external tool is missing."""


class LintError(NbtoolsError, ValueError):
    """A launch was refused because lint found blocking problems."""

    def __init__(self, findings: list, *, fix: str | None = None):
        self.findings = list(findings)
        lines = "\n".join(f"  - {f}" for f in self.findings)
        super().__init__(f"launch refused, {len(self.findings)} blocking finding(s):\n{lines}", fix=fix)


class CheckpointError(NbtoolsError, ValueError):
    """A checkpoint is missing, truncated, inconsistent or in a layout that cannot be merged here."""


class ConflictError(NbtoolsError, FileExistsError):
    """An operation would overwrite or duplicate something that already exists."""


class AccessDeniedError(NbtoolsError, PermissionError):
    """A file, directory or bucket exists but these credentials or permissions may not read (or write) it."""
