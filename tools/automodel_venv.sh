#!/usr/bin/env bash
# A small venv holding NeMo-Automodel (NeMo-RL v0.7's DTensor-v2 policy backend) for the NeMo-RL checkpoint oracle
# (tests/oracle/test_automodel_checkpoint.py): its own Checkpointer writes policy/weights on CPU ranks.
#
# The same shape as tools/verl_oracle_venv.sh: the project venv's site-packages through a .pth (torch 2.13.0+cpu,
# transformers, safetensors: never a CUDA torch), nemo-automodel itself with --no-deps (its full set pins
# transformers==5.18.0 and pulls megatron-fsdp, torchao, mistral-common, quack-kernels: CUDA kernels the checkpoint
# code does not import), then only what nemo_automodel.components.checkpoint imports that the project venv lacks.
# Reused while its stamp matches this file.
#
# usage: tools/automodel_venv.sh PROJECT_PYTHON VENV_DIR VERSION     (prints the venv's python on success)
set -euo pipefail
project_py=$1; venv=$2; version=$3
here=$(cd "$(dirname "$0")" && pwd)
stamp="$venv/.nbtools-automodel-$version-$(sha256sum "$here/automodel_venv.sh" | cut -c1-12)"
if [ -f "$stamp" ] && [ -x "$venv/bin/python" ]; then echo "$venv/bin/python"; exit 0; fi
rm -rf "$venv"
base=$("$project_py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv --without-pip "$venv"
site=$("$project_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" > "$own/_nbtools_project_venv.pth"
pip=("$project_py" -m pip --python "$venv/bin/python" install --quiet --no-compile --disable-pip-version-check)
"${pip[@]}" --no-deps "nemo-automodel==$version" 2>&1 | grep -v "^WARNING: Location" || true
"$venv/bin/python" -c "import nemo_automodel.components.checkpoint.checkpointing, torch; assert torch.__version__.endswith('+cpu')" >&2
touch "$stamp"
echo "$venv/bin/python"
