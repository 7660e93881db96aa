# Quick start: `make repro` runs the committed default pipeline; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.PHONY: install data repro paper results compare test lint format bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Fashion-MNIST for the offline preset, from Debian's package where apt-get can install it.
# Without it, the download stage falls back to torchvision's mirrors (needs internet).
data:
	@if [ ! -d $(FASHION_MNIST) ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; } || \
		echo "could not install dataset-fashion-mnist; the download stage will try the internet"; fi

repro: install data
	PATH="$(BIN):$$PATH" dvc repro

# Seed 000's experiment (needs internet; GPU recommended), recorded as the DVC experiment "paper".
paper: install
	PATH="$(BIN):$$PATH" dvc exp run -n paper -S preset=paper

# The headline table for the README, from metrics/evaluate.json.
results: install
	@$(PY) -m pipeline.report 2>/dev/null

# Every MLflow run of the preset's experiment, and test accuracy per commit and DVC experiment (reports/compare.md).
compare: install
	$(PY) -m pipeline.compare

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: install lint
	PATH="$(BIN):$$PATH" pytest

bench: install
	$(PY) benchmarks/bench_vit.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
