"""How the CLI reports a failure: one text on stderr, one JSON document with ``--json``, fixes in CLI words.

Why: the library's fixes are written for notebook users ("pass overwrite=True", "nbtools.backends.get(cfg).up()");
a terminal user needs the flag or command instead. Every error carries its fix in both forms as data
(``nbtools.errors.Fix``); this layer prints the CLI form. Every exception ends here as a message and a fix, never
as a raw traceback (``NBTOOLS_DEBUG=1`` shows it).

Example:
    >>> describe(ConflictError("out exists", fix=Fix("pass overwrite=True", cli="pass --overwrite")), fallback_fix="")
    Failure(error='out exists', fix='pass --overwrite', kind='ConflictError', code=1, problems=[])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Failure", "describe", "UsageError"]


class UsageError(Exception):
    """Bad command-line usage (exit 2); raised by the CLI's argparse parsers instead of exiting."""

    def __init__(self, message: str, usage: str, prog: str):
        super().__init__(message)
        self.message, self.usage, self.prog = message, usage, prog


@dataclass
class Failure:
    """A failed command as data: what went wrong, the next action, the exit status."""

    error: str
    fix: str
    kind: str
    code: int = 1
    problems: list[str] = field(default_factory=list)

    def doc(self, command: str | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The one JSON document ``--json`` prints for this failure."""
        d: dict[str, Any] = dict(extra or {})
        d.update(error=self.error, fix=self.fix, type=self.kind, exit=self.code, command=command)
        if self.problems:
            d["problems"] = self.problems
        return d

    def text(self, command: str | None) -> str:
        """The human form for stderr."""
        head = f"nbtools {command}: error:" if command else "nbtools: error:"
        return f"{head} {self.error}\n  fix: {self.fix}"


_OS_WHAT = {
    "FileNotFoundError": ("no such file or directory", "check the path (relative to the current directory)"),
    "IsADirectoryError": ("is a directory, not a file", "pass the file inside it"),
    "NotADirectoryError": ("is a file, not a directory", "pass the directory"),
    "PermissionError": ("permission denied", "make it readable (chmod u+r) or run as its owner"),
}


def _problems(e) -> tuple[str, str]:
    """A ConfigError as the CLI prints it: the problems without their fixes, then every fix once on one ``fix:``
    line (keyed by what each is about when they differ), so "fix:" never appears twice or as "see above"."""
    where = f" (in {e.source})" if e.source else ""
    if len(e.problems) == 1:
        return e.problems[0].text + where, e.problems[0].fix
    n = len(e.problems)
    error = f"{n} problems{where}:\n" + "\n".join(f"  - {p.text}" for p in e.problems)
    fixes = [(p.key or f"problem {i}", p.fix) for i, p in enumerate(e.problems, 1) if p.fix]
    if len({fix for _, fix in fixes}) == 1 and len(fixes) == n:
        return error, fixes[0][1]
    return error, "; ".join(f"{label}: {fix}" for label, fix in fixes)


def describe(e: BaseException, *, fallback_fix: str) -> Failure:
    """Any exception as a Failure, with the CLI form of its fix; an unknown type is reported as a bug, not a traceback."""
    from nbtools.errors import ConfigError, DependencyError, NbtoolsError

    if isinstance(e, ImportError) and not isinstance(e, NbtoolsError):  # an optional extra: name it
        e = DependencyError.from_import(e) or e
    kind = type(e).__name__
    if isinstance(e, ConfigError):
        error, fix = _problems(e)
        return Failure(error, e.cli_fix or fix or fallback_fix, kind, problems=[str(p) for p in e.problems])
    if isinstance(e, NbtoolsError):
        return Failure(e.what, e.cli_fix or fallback_fix, kind)
    if isinstance(e, OSError) and kind in _OS_WHAT:
        what, fix = _OS_WHAT[kind]
        return Failure(f"{e.filename or ''}: {what}".lstrip(": "), fix, kind)
    if isinstance(e, OSError):
        return Failure(f"{e.filename or ''}: {e.strerror or e}".lstrip(": "), "check the path and the disk", kind)
    if isinstance(e, (ValueError, KeyError, TimeoutError, RuntimeError)):
        return Failure(f"{kind}: {e}", "check the arguments above; re-run with NBTOOLS_DEBUG=1 for the traceback", kind)
    return Failure(f"unexpected {kind}: {e}", "this is a bug in nbtools: re-run with NBTOOLS_DEBUG=1 and report the "
                   "traceback with the command line", kind)
