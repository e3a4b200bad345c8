"""The core without its optional extras (issue 43): ``pip install nbtools-grpo`` alone imports, loads and lints an
experiment, checks its fit, builds its manifests and launch plan; the modules jobs carry into the cluster import; and
a command that needs an extra names it (``pip install 'nbtools-grpo[gke]'``) instead of a raw ImportError.

One subprocess whose import system refuses every package of the extras (a meta-path blocker, as if not installed).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from nbtools.errors import DISTRIBUTION, EXTRAS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

_CHILD = r"""
import importlib.abc, json, sys
BLOCKED = set(sys.argv[1].split(","))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NotInstalled())
import nbtools
from nbtools import config
from nbtools.errors import DependencyError

out = {}
gke = config.load("experiments/gke-b200-gemma3-1b.yaml", backend="gke")
local = config.load("experiments/local.yaml")
out["lint"] = [nbtools.launch.lint(c).ok for c in (gke, local)]
out["fit"] = nbtools.fit.check(gke).fits
out["manifests"] = sorted({o["kind"] for o in nbtools.manifests.workload_objects(gke)})
out["plan"] = bool(nbtools.launch.build(gke).entrypoint)
out["cli plan"] = nbtools.cli.main(["plan", "experiments/gke-b200-gemma3-1b.yaml"])
import nbtools.evals.run, nbtools.rewards.nemo_rl_env, nbtools._rayfs  # what in-cluster jobs run (python -m ...)
import os, tempfile  # listing and choosing checkpoints reads listings and JSON only: no torch (issue 40)
ck = tempfile.mkdtemp()
for n in (4, 8):
    os.makedirs(f"{ck}/step_{n}/policy/weights/model")
    open(f"{ck}/step_{n}/policy/weights/model/shard-00001.safetensors", "wb").close()
    open(f"{ck}/step_{n}/training_info.json", "w").write('{"step": %d}' % n)
out["listed"] = [int(s) for s in nbtools.checkpoints.list_checkpoints(ck)["step"]]
out["latest"] = os.path.basename(str(nbtools.checkpoints.latest(ck)))
for what, call in (("kube", lambda: nbtools.kube.connect()), ("checkpoints", lambda: nbtools.checkpoints.merge)):
    try:
        call()
        out[what] = None
    except DependencyError as e:
        out[what] = str(e)
out["cli up"] = nbtools.cli.main(["up", "experiments/gke-b200-gemma3-1b.yaml", "--apply"])
out["loaded"] = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
print("RESULT " + json.dumps(out))
"""


def _import_name(requirement: str) -> str:
    return re.split(r"[<>=!\[; ]", requirement, maxsplit=1)[0].lower().replace("-", "_")


def test_the_extras_table_is_pyproject():
    extras = PYPROJECT["project"]["optional-dependencies"]
    listed = {_import_name(r): name for name in ("gke", "merge", "notebooks", "tui") for r in extras[name]}
    assert listed == EXTRAS
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    assert f"{DISTRIBUTION}[gke,merge,notebooks]" in extras["test"], "make test installs every extra"
    core = {_import_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not core & set(EXTRAS), "a package is either core or in an extra"


def test_the_core_plans_without_the_extras_and_a_missing_extra_names_its_pip_install(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "NBTOOLS_RUNS_DIR": str(tmp_path / "runs"), "KUBECONFIG": str(tmp_path / "none"),
           "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    r = subprocess.run([sys.executable, "-c", _CHILD, ",".join(sorted(EXTRAS))], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(line[len("RESULT "):])
    assert out["lint"] == [True, True] and out["fit"] is True and out["plan"] is True and out["cli plan"] == 0
    assert {"RayCluster", "ServiceAccount"} <= set(out["manifests"])
    assert out["loaded"] == [], "the core imported a package of an extra"
    assert "needs kubernetes" in out["kube"] and "pip install 'nbtools-grpo[gke]'" in out["kube"]
    assert out["listed"] == [4, 8] and out["latest"] == "step_8", "listing checkpoints needs no extra"
    assert "needs torch" in out["checkpoints"] and "pip install 'nbtools-grpo[merge]'" in out["checkpoints"]
    assert out["cli up"] == 1 and "fix: pip install 'nbtools-grpo[gke]'" in r.stderr
