"""What a subcommand returns (:class:`Out`) and how its data becomes plain JSON."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Out", "_jsonable", "_records"]


@dataclass
class Out:
    """What a subcommand produced: the JSON document, its human text, and the exit status."""

    data: Any
    text: str | None = None  # printed without --json (default: the JSON, indented)
    code: int = 0
    error: str | None = None  # printed on stderr when code != 0
    fix: str | None = None  # the next action, in the CLI's words (printed with the error)
    exact: bool = False  # --json: print ``data`` as it is even when code != 0 (a documented shape, e.g. `health`)


def _jsonable(obj: Any) -> Any:
    """Plain JSON values for numpy/pandas/paths/dataclasses/enums (NaN and NaT → null, ±inf → "Infinity")."""
    import dataclasses
    import enum

    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    if isinstance(obj, enum.Enum):
        return _jsonable(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if type(obj).__name__ in ("NaTType", "DataFrame"):
        return None if type(obj).__name__ == "NaTType" else _records(obj)
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if hasattr(obj, "item") and callable(obj.item):
        with contextlib.suppress(ValueError, TypeError):
            obj = obj.item()
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, float) and math.isinf(obj):  # JSON has no Infinity: keep it as text, not as a missing value
        return "Infinity" if obj > 0 else "-Infinity"
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def _records(df) -> list[dict]:
    return _jsonable(df.to_dict(orient="records"))


# ---------------------------------------------------------------------------------------------- parser
