# mbexp: `make quickstart` and `make test` set everything up on a fresh machine with Python 3.11.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
RESULTS ?= results

.DEFAULT_GOAL := help
.PHONY: help install test lint quickstart table data bench grad-at-init clean clean-runs

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# torch first, and only if missing: a bare `torch` requirement would pull a multi-GB CUDA build
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP) ## create .venv with torch (TORCH=... to choose), the package and its dev tools

test: install ## run the whole test suite
	$(BIN)/python -m pytest -q

lint: install ## ruff check of the package, scripts and tests
	$(BIN)/ruff check mbexp scripts tests

quickstart: install ## set up, run the quickstart sweep on the embedded corpus, print its table
	$(BIN)/python -m mbexp.train -m +experiment=quickstart
	$(BIN)/python scripts/make_table.py --results $(RESULTS) --only quickstart

table: install ## results/runs -> results/tables/*.{md,csv,tex}, results/figures/*.png, a W&B run (TUNE=key MARGIN=nats)
	$(BIN)/python scripts/make_table.py --results $(RESULTS) $(if $(TUNE),--tune $(TUNE)) $(if $(MARGIN),--margin $(MARGIN))

data: install ## prepare the default corpus and print its statistics
	$(BIN)/python -m mbexp.data

bench: install ## measure peak FLOP/s, trainer vs bare-loop throughput, precisions, variants
	$(BIN)/python scripts/bench.py

grad-at-init: install ## per-layer gradient norms at initialisation, Pre-LN vs Post-LN
	$(BIN)/python scripts/grad_at_init.py

clean-runs: ## delete checkpoints and locks under results/runs, keeping summaries and metrics
	find results/runs \( -name 'checkpoint*.pt' -o -name '.lock' -o -name '.*.tmp' \) -delete 2>/dev/null || true

clean: ## remove the venv, caches and Hydra/W&B scratch (not results/runs)
	rm -rf $(VENV) .pytest_cache .ruff_cache data_cache wandb results/hydra *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
