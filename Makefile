# mbexp: `make quickstart` and `make test` set everything up on a fresh machine with Python 3.11.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
MUP ?= mup==1.0.0
STAMP := $(VENV)/.installed
# Python writes each module's byte code as it is first imported, whatever the shell says: far cheaper than
# compiling every installed file up front, and no process pays for what another already compiled
unexport PYTHONDONTWRITEBYTECODE
RESULTS ?= results
PY ?= 3.12
WHEELHOUSE ?= wheelhouse
# the interpreter that builds the wheelhouse: python$(PY) on PATH, else a pyenv one (PYTHON_WHEELS=... to choose)
PYTHON_WHEELS ?= $(shell for p in python$(PY) $(HOME)/.pyenv/versions/$(PY)*/bin/python$(PY); do \
                   $$p -c 'import sys' 2>/dev/null && { echo $$p; break; }; done)

.DEFAULT_GOAL := help
.PHONY: help install test test-fast lint quickstart table report data bench bench-full gpu-check wheelhouse \
        check-wheelhouse grad-at-init coord-check clean clean-runs mutants mutants-full study

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# torch first, and only if missing: a bare `torch` requirement would pull a multi-GB CUDA build; not
	@# byte-compiled here (most of its files are never imported): see PYTHONDONTWRITEBYTECODE above
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q --no-compile "$(TORCH)"
	@# the rest with uv (parallel downloads), or with pip where uv cannot be had or fails
	{ $(BIN)/python -m pip install -q uv && $(BIN)/python -m uv pip install -q --python $(BIN)/python \
	  -e ".[dev]"; } || $(BIN)/python -m pip install -q --no-compile -e ".[dev]"
	@# mup, μP's reference (tests/test_mup.py), without its torchvision requirement: it would pull another torch
	$(BIN)/python -m pip install -q --no-deps "$(MUP)"
	@# the byte code of what a run imports, once: a shell that sets PYTHONDONTWRITEBYTECODE still finds it
	$(BIN)/python -c "import importlib, pkgutil, mbexp, torch._dynamo; \
	  [importlib.import_module(m.name) for m in pkgutil.walk_packages(mbexp.__path__, 'mbexp.')]"
	@touch $(STAMP)

install: $(STAMP) ## create .venv with torch (TORCH=... to choose), the package and its dev tools

test: install ## run the whole test suite
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

test-fast: install ## the test suite without the tests marked slow (real sweeps, multi-process runs)
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not slow"

lint: install ## ruff check of the package, scripts and tests
	$(BIN)/ruff check mbexp scripts tests

mutants: install ## mutation check: each declared break of the core must fail its tests (ARGS=--only NAME,...)
	$(BIN)/python scripts/mutants.py $(ARGS)

mutants-full: install ## mutmut's mutants of the core -> results/mutation/report.md; resumes (MODULES=mbexp/x.py JOBS=1)
	$(BIN)/python scripts/mutation_score.py run $(if $(MODULES),--modules $(MODULES)) --jobs $(or $(JOBS),1)

quickstart: install ## set up, run the quickstart sweep on the embedded corpus, print its table
	$(BIN)/python -m mbexp.train -m +experiment=quickstart
	$(BIN)/python scripts/make_table.py --results $(RESULTS) --only quickstart

table: install ## results/runs -> results/tables/*.{md,csv,tex}, results/figures/*.png, a W&B run (TUNE=key MARGIN=nats)
	$(BIN)/python scripts/make_table.py --results $(RESULTS) $(if $(TUNE),--tune $(TUNE)) $(if $(MARGIN),--margin $(MARGIN))

report: install ## README's claims block and docs/results.md from results/claims.yaml and the runs (after make table)
	$(BIN)/python scripts/make_report.py --results $(RESULTS)

study: install ## a declared study end to end: scan, choose each row's LR (or tuned key), planned seeds (NAME=study JOBS=2)
	$(BIN)/python -m mbexp.study $(NAME) --results $(RESULTS) --jobs $(or $(JOBS),1)

data: install ## prepare the default corpus and print its statistics
	$(BIN)/python -m mbexp.data

bench: install ## what the defaults follow (precision, speed bar, trainer vs bare loop, OpenMP) and Muon/soft-cap cost
	$(BIN)/python scripts/bench.py

bench-full: install ## make bench plus the matmul peak (MFU), FFN variants and norms
	$(BIN)/python scripts/bench.py --full

gpu-check: install ## on a CUDA machine: tests, bench, 200 steps of each GPU preset -> results/bench/cuda.json
	$(BIN)/python scripts/gpu_check.py

.PHONY: gpu-ladder-bench
gpu-ladder-bench: install ## on a CUDA machine: a sweep sequential vs joblib 2/4/8 jobs on one GPU -> cuda.json (ARGS=...)
	$(BIN)/python scripts/gpu_ladder_bench.py $(ARGS)

wheelhouse: ## wheels of every dependency but torch, for Python PY=3.12, in wheelhouse/py3.12 (offline GPU nodes)
	@test -n "$(PYTHON_WHEELS)" || { echo "make wheelhouse: no python$(PY) found; install one or set PYTHON_WHEELS=" >&2; exit 2; }
	rm -rf $(WHEELHOUSE)/py$(PY) && mkdir -p $(WHEELHOUSE)/py$(PY)
	@# the requirements of the package and its dev extra, less torch (the node has its own CUDA build),
	@# plus setuptools, which an offline `pip install -e .` needs to build the package itself
	$(PYTHON_WHEELS) -c 'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	  reqs = p["dependencies"] + p["optional-dependencies"]["dev"] + ["setuptools>=68"]; \
	  print("\n".join(r for r in reqs if not re.match(r"torch\b", r)))' > $(WHEELHOUSE)/py$(PY)/requirements.txt
	$(PYTHON_WHEELS) -m pip wheel -q -w $(WHEELHOUSE)/py$(PY) -r $(WHEELHOUSE)/py$(PY)/requirements.txt
	@! ls $(WHEELHOUSE)/py$(PY) | grep -E '^(torch|triton|nvidia)' || { echo "torch came in as a dependency" >&2; exit 1; }
	@echo "$(WHEELHOUSE)/py$(PY): $$(ls $(WHEELHOUSE)/py$(PY)/*.whl | wc -l) wheels, $$(du -sh $(WHEELHOUSE)/py$(PY) | cut -f1)"

check-wheelhouse: ## (needs PyPI) fresh PY venv + torch, offline install from the wheelhouse, a 2-step run
	PY=$(PY) WHEELHOUSE=$(WHEELHOUSE) PYTHON_WHEELS=$(PYTHON_WHEELS) TORCH="$(TORCH)" scripts/check_wheelhouse.sh

grad-at-init: install ## per-layer gradient norms at initialisation, Pre-LN vs Post-LN
	$(BIN)/python scripts/grad_at_init.py

coord-check: install ## μP's coordinate check, μP and SP side by side -> results/figures/mup_coord_check.png
	$(BIN)/python scripts/coord_check.py --out $(RESULTS)

clean-runs: ## delete checkpoints and locks under results/runs, keeping summaries and metrics
	find results/runs \( -name 'checkpoint*.pt' -o -name '.lock' -o -name '.*.tmp' \) -delete 2>/dev/null || true

clean: ## remove the venv, caches and Hydra/W&B scratch (not results/runs)
	rm -rf $(VENV) .pytest_cache .ruff_cache data_cache wandb results/hydra *.egg-info $(WHEELHOUSE)
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
