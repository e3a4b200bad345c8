"""Lint findings and the report that collects them (``blocking`` stops a submit, ``warning`` informs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from nbtools import _paths
from nbtools._escape import html as _h
from nbtools.errors import Fix

__all__ = ["Finding", "LintReport", "Severity"]

Severity = Literal["blocking", "warning"]


@dataclass(frozen=True)
class Finding:
    """One lint result: ``blocking`` findings stop ``launch.submit``; warnings are shown and let it go on."""

    severity: Severity
    rule: str
    key: str
    message: str
    fix: str  # given as a Fix where the notebook's words (an argument) and the CLI's (a flag) differ
    cli_fix: str = ""  # the fix in the CLI's words (default: ``fix``)

    def __post_init__(self) -> None:
        f = self.fix
        if isinstance(f, Fix):
            object.__setattr__(self, "fix", f.python)
        object.__setattr__(self, "cli_fix", self.cli_fix or (f.cli if isinstance(f, Fix) else f))

    def text(self, *, cli: bool = False) -> str:
        """One line: severity, key, problem and the fix (in the CLI's words with ``cli``)."""
        return f"[{self.severity}] {self.key}: {self.message}; fix: {self.cli_fix if cli else self.fix}"

    def __str__(self) -> str:
        return self.text()


@_paths.tidy_reprs
@dataclass
class LintReport:
    """All findings for one experiment; ``ok`` is True when none is blocking."""

    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # rule names that ran

    @property
    def ok(self) -> bool:
        return not self.blocking

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "blocking"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def rules(self) -> set[str]:
        """Names of the rules that fired."""
        return {f.rule for f in self.findings}

    def to_frame(self):
        """The findings as a DataFrame (severity, rule, key, message, fix)."""
        import pandas as pd

        return pd.DataFrame([vars(f) for f in self.findings], columns=["severity", "rule", "key", "message", "fix"])

    def text(self, *, cli: bool = False) -> str:
        """The report as lines; ``cli``: each fix in the CLI's words."""
        head = f"lint: {len(self.blocking)} blocking, {len(self.warnings)} warning(s); checked: {', '.join(self.checked)}"
        return "\n".join([head] + [f"  - {f.text(cli=cli)}" for f in self.findings])

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#2e7d32" if self.ok else "#c62828"
        head = (
            f"<b style='color:{color}'>{'OK to launch' if self.ok else 'Launch refused'}</b>: "
            f"{len(self.blocking)} blocking, {len(self.warnings)} warning(s) "
            f"<small>(checked: {_h(', '.join(self.checked))})</small>"
        )
        if not self.findings:
            return head
        rows = "".join(
            f"<tr><td>{f.severity}</td><td><code>{_h(f.key)}</code></td><td>{_h(f.message)}</td>"
            f"<td>{_h(f.fix)}</td></tr>"
            for f in self.findings
        )
        return f"{head}<table><tr><th>severity</th><th>key</th><th>problem</th><th>fix</th></tr>{rows}</table>"
