"""Paths as outputs show them: relative to the runs dir (``<runs_dir>/…``) or the home directory (``~/…``).

Why: an executed notebook is read on other machines (shared, exported, attached to an issue); the absolute paths of
the machine that ran it are noise there and tell others its layout. Only what is *shown* changes: commands, files
and URLs keep the real path (``str(url)``, f-strings and ``os.fspath`` are untouched).

Example:
    >>> remember_runs_dir(Path.home() / "nbtools" / "runs" / "20260101-000000")
    >>> shown(str(Path.home() / "nbtools" / "runs" / "20260101-000000" / "local-rehearsal" / "logs"))
    '<runs_dir>/local-rehearsal/logs'
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

__all__ = ["shown", "pasteable", "remember_runs_dir", "tidy_reprs", "Url", "Argv", "RUNS_DIR"]

RUNS_DIR = "<runs_dir>"
_CHECKOUT = Path(__file__).resolve().parent.parent
_runs_dirs: set[str] = set()


def remember_runs_dir(path: str | os.PathLike) -> None:
    """Show paths under ``path`` as ``<runs_dir>/…`` (``config.load`` calls this with the experiment's runs dir)."""
    _runs_dirs.add(str(Path(path).expanduser().resolve()))


def _prefixes() -> list[tuple[str, str]]:
    pairs = [(d, RUNS_DIR) for d in _runs_dirs]
    if env := os.environ.get("NBTOOLS_RUNS_DIR"):
        pairs.append((str(Path(env).expanduser().resolve()), RUNS_DIR))
    if (_CHECKOUT / "pyproject.toml").is_file():  # a checkout (editable install), not site-packages
        pairs.append((str(_CHECKOUT), "<checkout>"))
    if sys.prefix != sys.base_prefix:  # the virtualenv nbtools runs from (its python in commands)
        pairs.append((str(Path(sys.prefix).resolve()), "<venv>"))
        pairs.append((sys.prefix, "<venv>"))
    home = str(Path.home())
    if home not in ("/", ""):
        pairs.append((home, "~"))
    return sorted(set(pairs), key=lambda p: -len(p[0]))  # the longest (most specific) prefix wins


def shown(text: str, *, html: bool = False) -> str:
    """``text`` with every absolute path under the runs dir, the checkout, the virtualenv or ``~`` shortened
    (``html=True``: the names escaped, for HTML output)."""
    if not isinstance(text, str) or "/" not in text:
        return text
    for prefix, name in _prefixes():
        if html:
            name = name.replace("<", "&lt;").replace(">", "&gt;")
        if prefix and prefix in text:
            # only at a path boundary: a runs dir 'runs' must not eat 'runs2'
            text = re.sub(re.escape(prefix) + r"(?=[/\s'\"`<>),;:\]}&]|$)", lambda _m, n=name: n, text)
    return text


def pasteable(text: str) -> str:
    """``text`` with every absolute path under the runs dir or the checkout made relative to the working directory.

    Why: ``<runs_dir>/…`` is right in prose but breaks a command the user copies; a path relative to where the
    notebook (or the CLI) runs works when pasted there and names no machine's absolute path.
    """
    if not isinstance(text, str) or "/" not in text:
        return text
    here = os.getcwd()
    for prefix, name in _prefixes():
        if name in (RUNS_DIR, "<checkout>") and prefix and prefix in text:
            rel = os.path.relpath(prefix, here)
            text = re.sub(re.escape(prefix) + r"(?=[/\s'\"`<>),;:\]}&]|$)", lambda _m, r=rel: r, text)
    return text


def tidy_reprs(cls):
    """Class decorator: the class's ``__repr__``, ``_repr_html_`` and ``_repr_markdown_`` show paths with :func:`shown`.

    Apply it above ``@dataclass`` so the generated ``__repr__`` is wrapped too.
    """
    for name in ("__repr__", "_repr_html_", "_repr_markdown_"):
        method = cls.__dict__.get(name) or (getattr(cls, name, None) if name == "__repr__" else None)
        if method is None:
            continue

        def wrapper(self, *args, _method=method, _html=name == "_repr_html_", **kwargs):
            out = _method(self, *args, **kwargs)
            return shown(out, html=_html) if isinstance(out, str) else out

        functools.update_wrapper(wrapper, method)
        setattr(cls, name, wrapper)
    return cls


class Url(str):
    """A path or URL string (``str`` in every use) whose repr — what a notebook cell shows — is :func:`shown`."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The last component, as ``Path.name`` gives it (``step_30`` of ``gs://bucket/checkpoints/step_30``)."""
        return self.rstrip("/").rsplit("/", 1)[-1]

    def __repr__(self) -> str:
        return shown(str.__repr__(self))

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))

    def __reduce__(self):  # pickles (Ray, multiprocessing) as the plain string
        return (str, (str(self),))


class Argv(list):
    """A command's argv (``list`` in every use: ``subprocess.run(argv)`` runs the real paths) whose repr is
    :func:`shown`, one argument per line as IPython prints a list."""

    def __repr__(self) -> str:
        return shown(list.__repr__(self))

    def _repr_pretty_(self, p, cycle) -> None:
        import pprint

        p.text(shown(pprint.pformat(list(self), width=110)))

    def __reduce__(self):
        return (list, (list(self),))


def _register_yaml() -> None:
    """YAML writes a :class:`Url` as the string and an :class:`Argv` as the list (PyYAML's safe dumper refuses
    subclasses of ``str`` and ``list`` otherwise)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        return
    for dumper in (yaml.SafeDumper, yaml.Dumper):
        dumper.add_multi_representer(Url, lambda d, v: d.represent_str(str(v)))
        dumper.add_multi_representer(Argv, lambda d, v: d.represent_list(list(v)))


_register_yaml()
