"""nbtools._atomic: the one way nbtools writes files and directories, and the only module that renames.

Concurrent writers are real threads and real processes writing one file; a reader checks every read is one
writer's complete content, and the directory is checked for leftover or shared temp files.
"""

from __future__ import annotations

import ast
import hashlib
import json
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from nbtools import _atomic

ROOT = Path(__file__).resolve().parent.parent
SIZE = 1 << 20  # 1 MiB: big enough that a write takes several syscalls


def _payload(writer: str, n: int) -> bytes:
    """A recognisable complete content: a header naming the writer and a checksum of the body."""
    body = hashlib.sha256(f"{writer}-{n}".encode()).digest() * (SIZE // 32)
    return f"{writer} {n} {hashlib.sha256(body).hexdigest()}\n".encode() + body


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\n")
    parts = head.split()
    return len(parts) == 3 and len(body) == SIZE and hashlib.sha256(body).hexdigest() == parts[2].decode()


def _write_many(target: str, writer: str, times: int) -> list[str]:
    """A process's writer: ``times`` whole files, each with its own content; returns the temp names it used."""
    used = []
    for n in range(times):
        with _atomic.replace_file(target) as tmp:
            used.append(tmp.name)
            tmp.write_bytes(_payload(writer, n))
    return used


# -- no rename outside the helper --------------------------------------------------------------------------------


def _renames(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls that rename: os.replace/rename/renames, shutil.move, and ``x.replace(y)`` / ``x.rename(y)`` with one
    positional argument (Path's signature; str.replace takes two, DataFrame.rename and dataclasses.replace take
    keywords)."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, base = node.func.attr, ast.unparse(node.func.value)
        if (base == "os" and attr in ("replace", "rename", "renames")) or (base == "shutil" and attr == "move"):
            out.append((node.lineno, ast.unparse(node)))
        elif attr in ("replace", "rename") and base not in ("os", "dataclasses") and len(node.args) == 1 \
                and not node.keywords and not isinstance(node.args[0], (ast.Constant, ast.Dict)):
            out.append((node.lineno, ast.unparse(node)))
    for node in ast.walk(tree):  # `from os import replace` / `from shutil import move` would hide a rename
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            names = {a.name for a in node.names} & {"replace", "rename", "renames", "move"}
            out += [(node.lineno, f"from {node.module} import {n}") for n in names]
    return out


def test_only_the_atomic_helper_renames():
    found = []
    for p in sorted((ROOT / "nbtools").rglob("*.py")):
        if p.relative_to(ROOT).as_posix() == "nbtools/_atomic.py":
            continue
        found += [f"{p.relative_to(ROOT)}:{line}: {src}" for line, src in _renames(ast.parse(p.read_text()))]
    assert not found, "write through nbtools._atomic (write_text/write_json/open_atomic/replace_file/atomic_dir/" \
                      "publish) instead of renaming here:\n" + "\n".join(found)


def test_the_rename_finder_finds_renames():
    src = ("import os, shutil\nfrom pathlib import Path\nos.replace(a, b)\nos.rename(a, b)\nshutil.move(a, b)\n"
           "Path(a).replace(b)\ntmp.rename(final)\n's'.replace('a', 'b')\ndf.rename(columns={})\n"
           "dataclasses.replace(x, y=1)\nseries.replace({1: 2})\nfrom os import replace\n")
    assert [line for line, _ in _renames(ast.parse(src))] == [3, 4, 5, 6, 7, 12]


# -- the helpers ----------------------------------------------------------------------------------------------------


def test_writes_land_whole_with_default_permissions_and_no_temp(tmp_path):
    old = os.umask(0o022)
    try:
        p = _atomic.write_text(tmp_path / "a" / "b.txt", "hello")
        assert p.read_text() == "hello" and (p.stat().st_mode & 0o777) == 0o644  # not mkstemp's 0600
        _atomic.write_json(tmp_path / "s.json", {"x": [1, 2]}, indent=None)
        assert json.loads((tmp_path / "s.json").read_text()) == {"x": [1, 2]}
        script = _atomic.write_text(tmp_path / "run.sh", "#!/bin/sh\n", mode=0o755)
        assert (script.stat().st_mode & 0o777) == 0o755
        with _atomic.open_atomic(tmp_path / "log.jsonl") as f:
            f.write("one\n")
            assert not (tmp_path / "log.jsonl").exists()  # nothing at the target until the block ends
        assert (tmp_path / "log.jsonl").read_text() == "one\n"
    finally:
        os.umask(old)
    assert sorted(x.name for x in tmp_path.rglob("*")) == ["a", "b.txt", "log.jsonl", "run.sh", "s.json"]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temp(tmp_path):
    p = _atomic.write_text(tmp_path / "x.txt", "old")
    with pytest.raises(RuntimeError), _atomic.open_atomic(p) as f:
        f.write("half of the new")
        raise RuntimeError("killed mid-write")
    with pytest.raises(KeyboardInterrupt), _atomic.replace_file(p, suffix=".png") as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt
    with pytest.raises(TypeError):
        _atomic.write_json(p, {"not json": object()})
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["x.txt"]


def test_atomic_dir_replaces_only_when_asked_and_cleans_up(tmp_path):
    out = tmp_path / "model"
    with _atomic.atomic_dir(out) as d:
        (d / "config.json").write_text("{}")
        assert not out.exists()
    assert (out / "config.json").read_text() == "{}"
    with pytest.raises(OSError), _atomic.atomic_dir(out) as d:  # a complete directory is never replaced unasked
        (d / "config.json").write_text('{"new": 1}')
    with pytest.raises(ValueError), _atomic.atomic_dir(out, overwrite=True) as d:
        (d / "config.json").write_text('{"half": 1}')
        raise ValueError("failed before the end")
    assert (out / "config.json").read_text() == "{}"
    with _atomic.atomic_dir(out, overwrite=True, durable=True) as d:
        (d / "config.json").write_text('{"new": 1}')
    assert (out / "config.json").read_text() == '{"new": 1}' and [x.name for x in tmp_path.iterdir()] == ["model"]


# -- two writers, one file ---------------------------------------------------------------------------------------


def test_concurrent_temp_names_are_never_shared(tmp_path):
    target = tmp_path / "state.json"
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda _: _atomic.temp_file(target), range(400)))
    assert len(set(names)) == 400 and all(n.parent == tmp_path and n.name.startswith(".state.json.") for n in names)


def test_threads_and_processes_writing_one_file_never_tear_it(tmp_path):
    target = tmp_path / "summary.bin"
    _atomic.write_bytes(target, _payload("seed", 0))
    stop, reads, torn = threading.Event(), [0], []

    def reader():
        while not stop.is_set():
            data = target.read_bytes()  # the name always exists: the rename swaps it in one step
            reads[0] += 1
            if not _complete(data):
                torn.append(len(data))

    def thread_writer(name: str) -> list[str]:
        return _write_many(str(target), name, 15)

    r = threading.Thread(target=reader)
    r.start()
    try:
        ctx = multiprocessing.get_context("spawn")  # fresh interpreters: real separate writers
        with ProcessPoolExecutor(2, mp_context=ctx) as procs, ThreadPoolExecutor(3) as threads:
            futures = [procs.submit(_write_many, str(target), f"proc{i}", 15) for i in range(2)]
            futures += [threads.submit(thread_writer, f"thread{i}") for i in range(3)]
            used = [name for f in futures for name in f.result(timeout=300)]
    finally:
        stop.set()
        r.join()
    assert not torn, f"{len(torn)} of {reads[0]} reads saw a partial file (sizes {torn[:5]})"
    assert reads[0] > 0 and _complete(target.read_bytes())
    assert len(used) == len(set(used)) == 75  # every write had a temp of its own
    assert [p.name for p in tmp_path.iterdir()] == ["summary.bin"]  # and none is left behind
