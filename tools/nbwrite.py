"""Dev helper: write a clean notebook from a list of ("md"|"code"|"params", source) cells.

Usage from a throwaway script:
    from tools.nbwrite import write
    write("notebooks/04_monitor.ipynb", [("md", "# 04 · Monitor\n> ..."), ("params", 'BACKEND: str = "local"  # ...'), ...])
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat


def write(path: str | Path, cells: list[tuple[str, str]]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},  # ipykernel's own: JupyterLab rewrites any other
        "language_info": {"name": "python"},
    }
    for kind, src in cells:
        src = src.strip("\n")
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        elif kind == "params":
            nb.cells.append(nbformat.v4.new_code_cell(src, metadata={"tags": ["parameters"]}))
        elif kind == "code":
            nb.cells.append(nbformat.v4.new_code_cell(src))
        else:
            raise ValueError(kind)
    for c in nb.cells:  # stable ids keep diffs small
        c.pop("id", None)
    nb.nbformat_minor = 4
    p = Path(path)
    p.write_text(nbformat.writes(nb) + ("" if nbformat.writes(nb).endswith("\n") else "\n"))
    return p


if __name__ == "__main__":
    sys.exit("import this module; see the docstring")
