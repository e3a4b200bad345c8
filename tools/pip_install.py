"""``pip install ARGS`` for the Python that runs this file, done by uv when it can do exactly what pip would.

Why: building the project's venvs (``make install``, the vLLM venv, the per-Python checkpoint venvs) spent most of its
CPU in pip unpacking wheels and resolving; uv does the same install in a fraction of the CPU (numbers in the Makefile).

Faithful to pip: pip itself parses ARGS together with its configuration (``pip config list``: its config files and
PIP_* variables, e.g. find-links on local disk, extra file:// indexes, a global constraint file) and the parsed options
are handed to uv one by one, with pip's index semantics (the best version over every index and find-links location:
``--index-strategy unsafe-best-match``) and none of uv's own configuration (``--no-config``). An option uv cannot
mirror, a missing uv, or a uv that fails makes this run pip instead, with one line on stderr saying why.

    PYTHON tools/pip_install.py [pip install arguments...]

uv is the executable named by UV, else ``uv`` beside PYTHON or in NBTOOLS_UV_FROM (a venv's bin directory: the uv
that ``make install`` put there, pinned in constraints.txt), else ``uv`` on PATH. NBTOOLS_NO_UV=1 always uses pip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# pip options with no bearing on what gets installed (logging, caches, prompts, pip's self-check)
IGNORED = {"cache_dir", "disable_pip_version_check", "progress_bar", "verbose", "no_color", "root_user_action",
           "warn_script_location", "warn_about_conflicts", "src_dir", "log", "no_input", "exists_action", "retries",
           "resume_retries", "require_venv", "deprecated_features_enabled", "features_enabled", "isolated_mode",
           "debug_mode", "no_python_version_warning", "keyring_provider", "no_clean", "help", "quiet", "timeout",
           "cert", "compile", "constraints", "requirements", "editables", "index_url", "extra_index_urls",
           "find_links", "no_index", "ignore_dependencies", "upgrade", "upgrade_strategy", "force_reinstall", "pre",
           "format_control", "trusted_hosts", "build_isolation", "use_pep517", "json_report_file", "dry_run"}

KEEP_UV = {"UV_CACHE_DIR", "UV_LINK_MODE", "UV_CONCURRENT_DOWNLOADS", "UV_CONCURRENT_INSTALLS"}


def _parse(args: list[str], env: dict[str, str]):
    """pip's own parse of ``pip install ARGS`` under ``env`` (its config files and PIP_* variables apply)."""
    from pip._internal.commands import create_command

    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        return create_command("install").parse_args(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def uv_command(uv: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The ``uv pip install`` command line and environment doing what ``pip install ARGS`` does here; raises
    ValueError naming the first pip option uv cannot mirror."""
    options, positional = _parse(args, dict(os.environ))
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    defaults, _ = _parse([], {**bare, "PIP_CONFIG_FILE": os.devnull})
    chosen, default = vars(options), vars(defaults)
    for key, value in chosen.items():
        if key not in IGNORED and value != default.get(key):
            raise ValueError(f"pip option {key}={value!r} has no uv equivalent here")
    if options.upgrade_strategy != "only-if-needed":
        raise ValueError(f"pip option upgrade_strategy={options.upgrade_strategy!r} has no uv equivalent here")
    if options.dry_run or options.json_report_file:
        raise ValueError("pip's --dry-run/--report have no uv equivalent here")
    if not options.build_isolation or options.use_pep517 is False:
        raise ValueError("pip's --no-build-isolation / legacy setup.py builds: no uv equivalent here")
    cmd = [uv, "pip", "install", "--no-config", "--python", sys.executable, "--index-strategy", "unsafe-best-match"]
    cmd += ["--quiet"] if options.quiet else []
    cmd += ["--compile-bytecode"] if options.compile else []
    cmd += ["--no-index"] if options.no_index else ["--index-url", options.index_url]
    for url in [] if options.no_index else options.extra_index_urls:
        cmd += ["--extra-index-url", url]
    for link in options.find_links:
        cmd += ["--find-links", link]
    for host in options.trusted_hosts:
        cmd += ["--allow-insecure-host", host]
    for path in options.constraints:
        cmd += ["--constraint", path]
    for path in options.requirements:
        cmd += ["--requirement", path]
    for path in options.editables:
        cmd += ["--editable", path]
    fc = options.format_control
    for flag, names in (("--only-binary", fc.only_binary), ("--no-binary", fc.no_binary)):
        if names:
            cmd += [flag, ",".join(sorted(names))]
    cmd += ["--no-deps"] if options.ignore_dependencies else []
    cmd += ["--upgrade"] if options.upgrade else []
    cmd += ["--reinstall"] if options.force_reinstall else []
    cmd += ["--prerelease", "allow"] if options.pre else []
    cmd += ["--no-cache"] if options.cache_dir is False else []  # pip --no-cache-dir
    # only pip's configuration says what is installed from where (uv's cache location and link mode may stay)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in KEEP_UV}
    if options.cert:
        env["SSL_CERT_FILE"] = options.cert
    env["UV_HTTP_TIMEOUT"] = str(int(options.timeout))
    return cmd + list(positional), env


def find_uv() -> str | None:
    """UV, else the uv beside this Python or in NBTOOLS_UV_FROM (the one constraints.txt pins), else uv on PATH."""
    if os.environ.get("UV"):
        return os.environ["UV"] if os.access(os.environ["UV"], os.X_OK) else None
    beside = [Path(sys.executable).parent / "uv"]
    beside += [Path(os.environ["NBTOOLS_UV_FROM"]) / "uv"] if os.environ.get("NBTOOLS_UV_FROM") else []
    for candidate in (*beside, shutil.which("uv")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def main(args: list[str]) -> int:
    pip = [sys.executable, "-m", "pip", "install", *args]
    uv = None if os.environ.get("NBTOOLS_NO_UV") == "1" else find_uv()
    why = "NBTOOLS_NO_UV=1" if os.environ.get("NBTOOLS_NO_UV") == "1" else "no uv found (UV, PATH, the venv's bin)"
    if uv is not None:
        try:
            cmd, env = uv_command(uv, args)
        except ValueError as e:
            why = str(e)
        else:
            rc = subprocess.run(cmd, env=env).returncode
            if rc == 0:
                return 0
            why = f"uv exited {rc}"
    print(f"pip_install: pip installs instead of uv ({why})", file=sys.stderr)
    return subprocess.run(pip).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
