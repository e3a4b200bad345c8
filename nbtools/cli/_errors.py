"""How the CLI reports a failure: one text on stderr, one JSON document with ``--json``, fixes in CLI words.

Why: the library's fixes are written for notebook users ("pass overwrite=True", "nbtools.cluster.down(cfg)");
a terminal user needs the flag or command instead. The library keeps its messages; this layer rewrites the
known phrases for the CLI only. Every exception ends here as a message and a fix, never as a raw traceback
(``NBTOOLS_DEBUG=1`` shows it).

Example:
    >>> cli_words("pass overwrite=True to replace it, or choose another out_dir")
    'pass --overwrite to replace it, or choose another OUT_DIR'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Failure", "cli_words", "describe", "UsageError"]

# (library phrase, CLI phrase): applied in order to error messages and fixes the CLI prints.
_WORDS: list[tuple[re.Pattern[str], str]] = [(re.compile(p), r) for p, r in [
    (r"call \w+\([^()]*overwrite=True\)", "pass --overwrite"),
    (r"\boverwrite=True\b", "--overwrite"),
    (r"\bchoose another out_dir\b", "choose another OUT_DIR"),
    (r"\bpass config= with\b", "pass --config PATH with"),
    (r"\bpass config=(?=[\s(]|$)", "pass --config PATH"),
    (r"\bconfig= (object|dict)\b", r"config \1"),
    (r"\bresume=True\b", "--resume"),
    (r"\ballow_mismatch=True\b", "--allow-mismatch"),
    (r"\balpha=(\d[\d.]*)", r"--alpha \1"),
    (r"\bbackend=['\"](\w+)['\"]", r"--backend \1"),
    (r"nbtools\.cluster\.down\(cfg\)", "`nbtools down EXPERIMENT.yaml --apply`"),
    (r"nbtools\.cluster\.up\(cfg, timeout=(\d+)\)", r"`nbtools up EXPERIMENT.yaml --apply --timeout \1`"),
    (r"nbtools\.cluster\.up\(cfg[^()]*\)", "`nbtools up EXPERIMENT.yaml --apply`"),
    (r"nbtools\.jobs\.(?:attach\([^()]*\)\.)?logs\([^()]*\)", "`nbtools jobs logs EXPERIMENT.yaml --id ID`"),
    (r"\bjob\.logs\(\)", "`nbtools jobs logs EXPERIMENT.yaml --id ID`"),
    (r"\bjob\.status\(\)", "`nbtools jobs status EXPERIMENT.yaml --id ID`"),
    (r"\bjob\.wait\(timeout=[^()]*\)", "`nbtools launch EXPERIMENT.yaml --follow --timeout SECONDS`"),
    (r"\bjob\.follow\(\)", "`nbtools launch EXPERIMENT.yaml --follow`"),
    (r"\bnbtools\.checkpoints\.merge\b", "`nbtools merge`"),
    (r"nbtools\.launch\.resubmit\(cfg\)", "`nbtools launch EXPERIMENT.yaml --retry`"),
    (r"nbtools\.launch\.supervise\(cfg[^()]*\)", "`nbtools launch EXPERIMENT.yaml --supervise`"),
    (r"nbtools\.launch\.submit\(cfg\)", "`nbtools launch EXPERIMENT.yaml`"),
    (r"\bpass force=True / --force\b", "pass --force"),
    (r"\bcfg\.log_dir\b", "the experiment's log_dir"),
    (r"\bcfg\.checkpoint_dir\b", "the experiment's checkpoint_dir"),
    (r"\bexp=None for the latest\b", "the log_dir for the latest exp_NNN"),
]]


def cli_words(text: str) -> str:
    """Rewrite library-argument advice in ``text`` into the CLI's flags and commands."""
    for pattern, repl in _WORDS:
        text = pattern.sub(repl, text)
    return text


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


def _split_fix(message: str, fix: str | None) -> tuple[str, str | None]:
    """Separate a trailing ``fix: ...`` (how NbtoolsError and ConfigError problems carry it) from the message."""
    if fix:
        suffix = f"\n  fix: {fix}"
        return (message[: -len(suffix)] if message.endswith(suffix) else message), fix
    m = re.search(r"[;\n]\s*fix: (.+)$", message, flags=re.S)
    if m and "\n" not in m.group(1):
        return message[: m.start()], m.group(1)
    return message, None


def describe(e: BaseException, *, fallback_fix: str) -> Failure:
    """Any exception as a Failure, in CLI words; unknown exception types are reported as a bug, not a traceback."""
    from nbtools.errors import ConfigError, NbtoolsError

    kind = type(e).__name__
    if isinstance(e, ConfigError):
        problems = [cli_words(p) for p in e.problems]
        fixes = [m.group(1) for p in problems if (m := re.search(r"fix: (.+)$", p))]
        msg = str(e).split("\n", 1)[0] + "\n" + "\n".join(f"  - {p}" for p in problems)
        fix = fixes[0] if len(fixes) == 1 else ("apply the fix named in each problem above" if fixes else fallback_fix)
        return Failure(msg, fix, kind, problems=problems)
    if isinstance(e, NbtoolsError):
        msg, fix = _split_fix(str(e), e.fix)
        return Failure(cli_words(msg), cli_words(fix or fallback_fix), kind)
    if isinstance(e, OSError) and kind in _OS_WHAT:
        what, fix = _OS_WHAT[kind]
        return Failure(f"{e.filename or ''}: {what}".lstrip(": "), fix, kind)
    if isinstance(e, OSError):
        return Failure(f"{e.filename or ''}: {e.strerror or e}".lstrip(": "), "check the path and the disk", kind)
    if isinstance(e, (ValueError, KeyError, TimeoutError, RuntimeError)):
        return Failure(f"{kind}: {e}", "check the arguments above; re-run with NBTOOLS_DEBUG=1 for the traceback", kind)
    return Failure(f"unexpected {kind}: {e}", "this is a bug in nbtools: re-run with NBTOOLS_DEBUG=1 and report the "
                   "traceback with the command line", kind)
