"""Read an experiment YAML safely: duplicate keys refused, alias expansion bounded, errors without file content.

Why: PyYAML's ``safe_load`` keeps the last of two equal keys (a silently lost setting) and shares aliased nodes,
which the config's hash, ``dump`` and ``dataclasses.asdict`` then expand: a 393-byte "billion laughs" file took
33 s and 277 MB. The node graph is measured before anything is constructed, so such a file fails in
milliseconds. Error texts give line and column but never the offending line itself, which may hold a token.

Example:
    >>> load_yaml("name: x\\ngrpo: {seed: 1}\\n")
    {'name': 'x', 'grpo': {'seed': 1}}
    >>> load_yaml("name: x\\nname: y\\n")  # ConfigError: line 2, column 1: duplicate key 'name' (first at line 1)
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from nbtools.errors import ConfigError

__all__ = ["MAX_NODES", "load_yaml", "expanded_size"]

MAX_NODES = 100_000  # values after alias expansion; a real experiment has a few hundred
_MERGE = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``5e-6`` as the number YAML 1.2 says it is (YAML 1.1 wants ``5.0e-6``).

    Why: the config's number fields are strict (a quoted number is refused), and a learning rate written ``1e-5``, as
    NeMo-RL's and verl's own configs write it, is a number to the user.
    """


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))


class _TooBig(Exception):
    pass


class _Cycle(Exception):
    pass


def _duplicate_keys(loader: yaml.SafeLoader, root: Node) -> None:
    """Refuse a key written twice in one mapping (keys compared as YAML resolves them: ``1`` and ``01`` are equal).

    Checked on the node graph before anything is constructed, so merge keys (``<<: *base``), which PyYAML
    flattens in place during construction, never look like duplicates.
    """
    stack, visited = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                stack += [key_node, value_node]
                if key_node.tag == _MERGE or not isinstance(key_node, ScalarNode):
                    continue
                key = loader.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in seen:
                    shown = str(key)[:80]
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {shown!r} (first at line {seen[key]}); fix: keep one `{shown}:` line",
                        key_node.start_mark)
                seen[key] = line
        elif isinstance(node, SequenceNode):
            stack += node.value


def expanded_size(root: Any, limit: int = MAX_NODES) -> int:
    """How many values ``root`` holds once every alias (shared node or object) is expanded.

    Works on a YAML node graph or on plain data; linear in the distinct nodes, because each node's size is
    memoised by identity. Raises ``_TooBig`` above ``limit`` and ``_Cycle`` for a recursive alias.
    """
    memo: dict[int, int] = {}
    active: set[int] = set()

    def children(x: Any) -> list:
        if isinstance(x, MappingNode):
            return [n for pair in x.value for n in pair]
        if isinstance(x, SequenceNode):
            return list(x.value)
        if isinstance(x, dict):
            return [n for pair in x.items() for n in pair]
        if isinstance(x, (list, tuple, set, frozenset)):
            return list(x)
        return []

    def size(x: Any) -> int:
        kids = children(x)
        if not kids:
            return 1
        i = id(x)
        if i in memo:
            return memo[i]
        if i in active:
            raise _Cycle
        active.add(i)
        total = 1
        for k in kids:
            total += size(k)
            if total > limit:
                raise _TooBig
        active.discard(i)
        memo[i] = total
        return total

    return size(root)


def _where(e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.reader.ReaderError):  # position and character code, never the content around it
        return f"character {e.position + 1}: the control character #x{e.character:04x} is not allowed in YAML"
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return where + "; ".join(x for x in (e.context, e.problem) if x)
    return str(e).split("\n")[0]


def size_problem(data: Any, what: str = "the config") -> str | None:
    """A problem text when plain data is recursive or expands beyond ``MAX_NODES`` values, else None."""
    try:
        expanded_size(data)
    except _TooBig:
        return (f"{what} expands to more than {MAX_NODES:,} values (YAML anchors/aliases repeated inside each "
                "other?); fix: write the values out, without nested aliases")
    except _Cycle:
        return f"{what} refers to itself (a recursive YAML alias); fix: remove the alias that points at its own parent"
    except RecursionError:
        return f"{what} is nested too deeply; fix: flatten it (an experiment is a few levels deep)"
    return None


def load_yaml(text: str, source: str | None = None, *, what: str = "the file") -> Any:
    """Parse one YAML document with the rules above; ``ConfigError`` (line and column, never content) on failure.

    ``what`` names the text in the messages ("the file", or "the value" of a ``key=value`` override).
    """
    loader = None
    try:
        loader = _Loader(text)  # its reader refuses a NUL or other control character here (a ReaderError)
        node = loader.get_single_node()
        if node is None:
            return None
        problem = size_problem(node, what)
        if problem:
            raise ConfigError(problem, source=source)
        _duplicate_keys(loader, node)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        where = _where(e)  # a duplicate key names its own fix
        raise ConfigError(f"not valid YAML: {where}", source=source, fix=None if "fix:" in where else
                          f"correct {what} at that line (brackets, quotes, indentation, `key: value`)") from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply to read", source=source,
                          fix="flatten it (an experiment is a few levels deep)") from None
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - PyYAML's constructors crash on some tagged scalars (`!!int ` -> IndexError)
        raise ConfigError(f"not valid YAML: a value cannot be read ({type(e).__name__})", source=source,
                          fix="check the explicit tags (`!!int`, `!!binary`, ...) and their values") from None
    finally:
        if loader is not None:
            loader.dispose()
