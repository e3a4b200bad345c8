#!/usr/bin/env bash
# The checkpoint safety and merge tests under every interpreter given, each in a small venv (torch and what those
# tests import, nbtools itself without its other dependencies). Why: a pickle, an enum or a zipfile detail can change
# between Python releases (3.11.0-3.11.4 pickle an Enum member as getattr(EnumClass, NAME)); the merge must read a
# checkpoint written by any of them.
#
# torch: only a CPU wheel of the pinned release is installed, found by pip without an index (its find-links, e.g. a
# wheel directory on local disk) or on TORCH_CPU_INDEX when set (e.g. PyTorch's CPU index). PyPI's Linux wheel of
# torch 2.13.0 is the CUDA build (526.6 MB, plus several GB of cuda-toolkit/nvidia-* wheels); it is never downloaded
# here. An interpreter with no such wheel is reported "not tested" and fails the run only with REQUIRE_ALL=1.
#
# usage: [COVERED=3.11.7] [PROBE=.venv/bin/python] tools/test_pythons.sh VENV_PREFIX PYTHON...   (COVERED: a version `make test` already ran)
set -uo pipefail
prefix=$1; shift
torch_pin=$(grep -E '^torch==' constraints.txt)
tests=(tests/checkpoints/test_checkpoints.py tests/checkpoints/test_safety.py tests/checkpoints/test_unpickle.py)
deps=(transformers safetensors tokenizers pytest pytest-timeout pandas pyyaml fsspec xxhash msgspec pydantic)
declare -a summary
failed=0
for py in "$@"; do
  if ! ver=$("$py" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))' 2>/dev/null); then
    summary+=("$py: not tested (no such interpreter)"); [ "${REQUIRE_ALL:-0}" = 1 ] && failed=1; continue
  fi
  if [ "$ver" = "${COVERED:-}" ]; then summary+=("Python $ver: covered by make test (its .venv)"); continue; fi
  venv=$prefix/$ver
  # the wheel is looked for before a venv is made: PROBE (a Python with pip, the project's .venv under make) downloads
  # it for this interpreter's version, so an interpreter without a wheel costs no venv
  wheels=$(mktemp -d)
  if [ -n "${TORCH_CPU_INDEX:-}" ]; then where=(--index-url "$TORCH_CPU_INDEX"); else where=(--no-index); fi
  abi=cp${ver%.*}; abi=${abi//./}
  if ! "${PROBE:-$py}" -m pip download --quiet --no-deps --only-binary=:all: "${where[@]}" -d "$wheels" \
      --python-version "${ver%.*}" --implementation cp --abi "$abi" "$torch_pin" 2>/dev/null \
      || ! ls "$wheels"/torch-*+cpu-*.whl >/dev/null 2>&1; then
    summary+=("Python $ver: not tested (no $torch_pin CPU wheel for it without an index; set TORCH_CPU_INDEX)")
    rm -rf "$wheels"; [ "${REQUIRE_ALL:-0}" = 1 ] && failed=1; continue
  fi
  echo "== Python $ver ($py): venv $venv"
  if [ ! -x "$venv/bin/python" ] && ! "$py" -m venv "$venv"; then
    summary+=("Python $ver: FAILED to create a venv (Debian: apt-get install python3-venv)"); failed=1; rm -rf "$wheels"; continue
  fi
  # installs go through tools/pip_install.py: uv with pip's configuration when uv is there, else pip
  install=("$venv/bin/python" tools/pip_install.py --quiet --no-compile)
  if ! { "${install[@]}" --no-cache-dir "$wheels"/torch-*.whl \
         && "${install[@]}" -c constraints.txt "${deps[@]}" \
         && "${install[@]}" --no-deps -e . \
         && "$venv/bin/python" -c 'import sys, torch; sys.exit(not torch.__version__.endswith("+cpu"))'; }; then
    summary+=("Python $ver: FAILED to install"); failed=1; rm -rf "$wheels"; continue
  fi
  rm -rf "$wheels"
  # the in-cluster merge (a Ray job) and the merge of a checkpoint the rehearsal itself writes (it needs the whole
  # environment) are covered by `make test`; here only what reads and writes checkpoints
  "$venv/bin/python" -m pytest "${tests[@]}" -m "not ray and not slow" -q -p no:cacheprovider -p no:randomly
  rc=$?
  summary+=("Python $ver: pytest exit $rc")
  [ $rc -eq 0 ] || failed=1
done
echo "== checkpoint tests per interpreter"
printf '  %s\n' "${summary[@]}"
exit $failed
