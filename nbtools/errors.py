"""Small typed error hierarchy: every message says what was expected, what was seen, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Fix",
    "Problem",
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


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config, as data: the key, the value as shown, what is allowed, the fix.

    Why: a list of these is what :class:`ConfigError` carries, so a notebook, the CLI and ``--json`` each print a
    problem and its own fix their way, without parsing a sentence apart again. ``value`` is the value as a message may
    show it (a repr, redacted when it holds anything token-shaped), never the raw value; ``what`` is the problem in
    words without the key.

    Example:
        >>> str(Problem("grpo.seed", "'x'", "a whole number", "write a whole number", what="expected an integer, got 'x'"))
        "grpo.seed: expected an integer, got 'x'; fix: write a whole number"
    """

    key: str
    value: str | None = None
    allowed: str | None = None
    fix: str = ""
    what: str = ""

    def __str__(self) -> str:
        head = f"{self.key}: {self.what}" if self.key else self.what
        return f"{head}; fix: {self.fix}" if self.fix else head

    @property
    def text(self) -> str:
        """The problem without its fix (``key: what``)."""
        return f"{self.key}: {self.what}" if self.key else self.what

    @classmethod
    def from_text(cls, text: str) -> Problem:
        """A problem written as one sentence (``key: what; fix: action``), as the registries' rules and older
        ``ConfigError("…; fix: …")`` calls write it; the key is the leading ``key:`` when it reads as one."""
        body, _, fix = text.partition("; fix: ")
        head, sep, rest = body.partition(": ")
        if sep and head and len(head) <= 60 and head.count(" ") <= 1:  # `grpo.seed`, `--alpha 2`
            return cls(head, fix=fix, what=rest)
        return cls("", fix=fix, what=body)


class ConfigError(NbtoolsError, ValueError):
    """The experiment config is invalid; ``problems`` lists every issue found at once, each a :class:`Problem`.

    The message lists each problem once, one a line, each with its own fix (``key: what; fix: action``), so no fix
    is printed twice and none is "see above"; the CLI prints the same Problems its own way (``nbtools.cli._errors``).
    ``fix=`` is for an error whose action differs between a notebook and a terminal (a function argument vs a CLI
    flag). A problem given as text (``"what; fix: action"``, the registries' rules) is read into a Problem once, here.
    """

    def __init__(self, problems: list[Problem | str] | Problem | str, *, source: str | None = None,
                 fix: Fix | str | None = None):
        items = [problems] if isinstance(problems, (str, Problem)) else list(problems)
        self.problems: list[Problem] = [p if isinstance(p, Problem) else Problem.from_text(p) for p in items]
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = f"{len(self.problems)} problems" if len(self.problems) != 1 else "1 problem"
        NbtoolsError.__init__(self, f"{count}{where}:\n{lines}", fix=fix)

    @property
    def problem_fixes(self) -> list[str]:
        """Each problem's own fix (problems without one are left out)."""
        return [p.fix for p in self.problems if p.fix]


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


DISTRIBUTION = "nbtools-grpo"  # pyproject's project name (PyPI's `nbtools` is another project)

# The optional extras of pyproject.toml, by the import name each package is imported as: a missing one is named with
# the pip command that brings it (tests/test_extras.py checks this table against pyproject).
EXTRAS = {
    "kubernetes": "gke", "gcsfs": "gke",
    "torch": "merge", "transformers": "merge", "tokenizers": "merge", "safetensors": "merge", "huggingface_hub": "merge",
    "jupyterlab": "notebooks", "ipywidgets": "notebooks", "papermill": "notebooks", "nbclient": "notebooks",
    "nbformat": "notebooks", "matplotlib": "notebooks", "plotly": "notebooks", "tensorboard": "notebooks",
    "textual": "tui",
}


class DependencyError(NbtoolsError, ImportError):
    """An optional dependency or external tool is missing."""

    @classmethod
    def extra(cls, module: str, what: str = "") -> DependencyError:
        """The error for an optional package ``module`` (an import name in :data:`EXTRAS`), naming the extra.

        Example:
            >>> str(DependencyError.extra("kubernetes", "the gke backend"))
            "the gke backend needs kubernetes, in the optional extra [gke]\n  fix: pip install 'nbtools-grpo[gke]'"
        """
        extra = EXTRAS[module]
        return cls(f"{what or 'this'} needs {module}, in the optional extra [{extra}]",
                   fix=f"pip install '{DISTRIBUTION}[{extra}]' (in a clone: pip install -e '.[{extra}]')")

    @classmethod
    def from_import(cls, e: ImportError, what: str = "") -> DependencyError | None:
        """A missing optional package's import error as the error naming its extra; None for any other."""
        name = (getattr(e, "name", None) or "").split(".")[0]
        return cls.extra(name, what) if name in EXTRAS else None


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
