"""One provisioning step and how its argv is quoted in a script (used by the plan, its script and the step
builders, none of which the others need to import for it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from nbtools._escape import sh

__all__ = ["Step", "VARIABLE"]

# ${NAME} inside an argument: a value looked up once at apply time (e.g. the project number).
VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


@dataclass(frozen=True)
class Step:
    """One provisioning action: the exact command, a check that says "already done", and its undo.

    ``check`` passes when it exits 0 and prints something that contains every ``expect`` line and, when ``states``
    is given, is exactly one of them (a node pool that is ``ERROR`` is not done). A destroy step (``absent``) is done
    when its check exits 0 and does NOT print the resource; a check that fails (auth, network) proves nothing, so the
    command runs. ``stdin`` is shown and fed to the command; ``make_stdin`` (if set) builds the real input at apply
    time, so secret values never enter the plan, its display, its script or its state file.
    """

    name: str
    what: str
    command: tuple[str, ...]
    check: tuple[str, ...] | None = None
    undo: tuple[str, ...] | None = None
    expect: tuple[str, ...] = ()
    states: tuple[str, ...] = ()  # the check's output must be exactly one of these (e.g. RUNNING, RECONCILING)
    stdin: str | None = None
    make_stdin: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    script: str | None = None  # bash for to_script() when the argv form cannot express it (a secret from env)
    absent: bool = False  # destroy steps: done when the check finds nothing
    after: tuple[str, ...] = ()  # keep-going plans: skip this step when one of these steps failed
    within: str | None = None  # destroy: this resource is gone when that step's resource is gone
    refresh: bool = False  # run even when the check passes (re-apply a Secret from the environment)
    keep_if_refused: bool = False  # destroy: a refusal keeps the resource on purpose (a bucket that holds objects)
    hint: str | None = None  # the fix when the check finds the resource in a state outside ``states``
    invalidates: tuple[str, ...] = ()  # provision steps whose recorded "done" this step makes stale

    @property
    def command_str(self) -> str:
        return _join(self.command) + (" <<'EOF'\n" + self.stdin.rstrip("\n") + "\nEOF" if self.stdin else "")


def _quote(arg: str) -> str:
    if not VARIABLE.search(arg):
        return sh(arg)
    # keep ${VAR} expandable in the script: double quotes, every other $ " \ ` escaped
    parts = VARIABLE.split(arg)  # literal, name, literal, name, ...
    out = []
    for i, part in enumerate(parts):
        out.append("${" + part + "}" if i % 2 else re.sub(r'([$"\\`])', r"\\\1", part))
    return '"' + "".join(out) + '"'


def _join(argv: tuple[str, ...] | None) -> str:
    return " ".join(_quote(a) for a in argv) if argv else ""
