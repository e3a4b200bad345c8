#!/usr/bin/env bash
# One small venv per verl release for the oracle tests (tests/oracle): verl's own code, from PyPI, beside nbtools.
#
# Why this shape: verl's full dependency set (vLLM, flash-attn, a CUDA torch, wandb, ...) is gigabytes; the pieces the
# oracle runs (its Hydra config and validate_config, the rollout dump code, _balance_batch, core_algos, reward_score,
# DataProto) need only torch and a few small packages. So each venv sees the project venv's site-packages through a .pth
# file (torch 2.13.0+cpu, ray, hydra-core, numpy, pandas come from there: never a CUDA torch), installs verl itself
# with --no-deps, and then only what verl imports that the project venv lacks or has at a version the release cannot
# import (verl 0.7.0 imports transformers.AutoModelForVision2Seq, gone in transformers 5: it gets transformers<5 in its
# own site-packages, which come before the .pth's on sys.path). A venv is reused while its stamp matches this file.
#
# usage: tools/verl_oracle_venv.sh PROJECT_PYTHON VENV_DIR VERSION     (prints the venv's python on success)
set -euo pipefail
project_py=$1; venv=$2; version=$3
here=$(cd "$(dirname "$0")" && pwd)
# one builder per venv: two test modules (on two xdist workers) ask for the same release at once, and without the lock
# the second's `rm -rf` ran under the first's pip (a fresh-clone CI imported a half-installed tensordict)
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
stamp="$venv/.nbtools-verl-$version-$(sha256sum "$here/verl_oracle_venv.sh" | cut -c1-12)"
if [ -f "$stamp" ] && [ -x "$venv/bin/python" ]; then echo "$venv/bin/python"; exit 0; fi
rm -rf "$venv"
base=$("$project_py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv --without-pip "$venv"
site=$("$project_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$own/_nbtools_project_venv.pth"
pip=("$project_py" -m pip --python "$venv/bin/python" install --quiet --no-compile --disable-pip-version-check)
case "$version" in
  0.7.*) extra=("transformers<5" "huggingface_hub<1.0" "datasets<4.6") ;;
  *) extra=("transformers>=5.5.3,<5.11" "datasets" "TransferQueue>=0.1.10" cachetools uvicorn fastapi) ;;  # v1/trainer_base.py imports transfer_queue
esac
"${pip[@]}" --no-deps "verl==$version" 2>&1 | grep -v "^WARNING: Location" || true
# what verl's imported modules need beyond the project venv; pip sees the project's packages through the .pth
"${pip[@]}" "tensordict==0.10.0" codetiming dill pylatexenc torchdata peft accelerate "${extra[@]}" 2>&1 \
  | grep -v "^WARNING: Location\|requires\|incompatible\|^ERROR: pip's dependency resolver" || true
"$venv/bin/python" -c "import verl, torch; assert torch.__version__.endswith('+cpu'), torch.__version__" >&2
touch "$stamp"
echo "$venv/bin/python"
