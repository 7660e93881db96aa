# Quick start: `make repro` runs the committed default pipeline; `make test` runs the tests; `make help` lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.PHONY: install help data repro paper synthetic paper-20 ddp results results-write compare plots ui predict test test-unit test-reliability test-studies lint format bench bench-efficiency bench-compile bench-start ui-check gpu-check clean

install: $(VENV)/.installed ## the virtualenv .venv with the pinned dependencies and the vit-* commands

# Every target with its one line: the `## ` comment on its rule.
help: ## this list
	@grep -E '^[a-z0-9-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | awk 'BEGIN {FS = ":.*## "} {printf "make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Fashion-MNIST for the offline preset, from Debian's package where apt-get can install it.
# Without it, the download stage falls back to torchvision's mirrors (needs internet).
data: ## Fashion-MNIST from Debian's package (as root with apt-get; else the download stage fetches it)
	@if [ ! -d $(FASHION_MNIST) ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; } || \
		echo "could not install dataset-fashion-mnist; the download stage will try the internet"; fi

# dvc repro under pipeline.tools.progress: dvc's output unchanged, plus the stage number and the time left.
repro: install data ## says how long it takes here, then dvc repro: the committed pipeline, with its progress
	@$(PY) -m pipeline.tools.estimate || true
	PATH="$(BIN):$$PATH" $(PY) -m pipeline.tools.progress

# Seed 000's experiment (needs internet; GPU recommended), recorded as the DVC experiment "paper".
paper: install ## seed 000's experiment (paper preset) as the DVC experiment "paper"
	PATH="$(BIN):$$PATH" dvc exp run -n paper -S preset=paper -S 'masked_patch.extra_seeds=[]'

# Issue 38's opt-in study (docs/synthetic.md): synthetic fractal pretraining at 10k, 100k and 1M images, after the
# default pipeline (whose data and results it reads); hours on a 2-core CPU, each stage at most about 40 minutes.
# Each study stage runs alone (--single-item): a plain `dvc repro studies/synthetic/dvc.yaml` would also run every
# default stage upstream of the committed results it reads (on a new machine: the backbones, their pretraining axis)
# and could rewrite them. Each backbone is fine-tuned right after it is pretrained: a machine that stops between
# items loses one backbone at most (models are not in git), and a rerun skips what is up to date.
SYNTHETIC_STUDY := studies/synthetic/dvc.yaml
SYNTHETIC_ITEMS := vit-0 resnet-0 vit-1 resnet-1 vit-2 resnet-2
synthetic: install data ## issue 38's opt-in synthetic-pretraining study, stage by stage (hours)
	PATH="$(BIN):$$PATH" dvc repro prepare
	PATH="$(BIN):$$PATH" dvc repro --single-item $(SYNTHETIC_STUDY):synthetic_data
	for item in $(SYNTHETIC_ITEMS); do for stage in synthetic_pretrain synthetic_finetune; do \
		PATH="$(BIN):$$PATH" dvc repro --single-item $(SYNTHETIC_STUDY):$$stage@$$item || exit 1; done; done
	PATH="$(BIN):$$PATH" dvc repro --single-item $(SYNTHETIC_STUDY):synthetic_scale

# The training stages under torchrun, one process per GPU (DistributedDataParallel: NCCL on GPUs, gloo on CPUs), with
# params.yaml's global batch and steps, then recorded in dvc.lock as if `dvc repro` had run them. For the paper
# preset: set `preset: paper` (or run `make paper` once for the data and backbone), then e.g. `make ddp NPROC=8`.
NPROC ?= 2
DDP_STAGES ?= train_scratch linear_probe
ddp: install ## the training stages under torchrun, NPROC processes (default 2), then dvc repro
	PATH="$(BIN):$$PATH" dvc repro --single-item download prepare backbone
	for stage in $(DDP_STAGES); do \
		PATH="$(BIN):$$PATH" torchrun --standalone --nproc_per_node $(NPROC) -m pipeline.stages.$$stage || exit 1; done
	PATH="$(BIN):$$PATH" dvc commit --force $(DDP_STAGES)
	PATH="$(BIN):$$PATH" dvc repro

# The same on the course's larger split (20% of Food-101's pizza/steak/sushi: about 450 train / 150 test).
# Its SHA-256 was pinned from a Git LFS pointer of a public copy (31,491,084 bytes).
PAPER_20_URL := https://github.com/mrdbourke/pytorch-deep-learning/raw/main/data/pizza_steak_sushi_20_percent.zip
PAPER_20_SHA256 := 4c7589efc2b369364d602906c5bd2d563dfd73e1e0083565ffb23dd731eb9d88
paper-20: install ## the paper preset on the course's larger 20% split
	PATH="$(BIN):$$PATH" dvc exp run -n paper-20 -S preset=paper -S 'masked_patch.extra_seeds=[]' -S paper.url=$(PAPER_20_URL) -S paper.sha256=$(PAPER_20_SHA256)

# The README's tables, from metrics/evaluate.json, data_hunger.json and ablation.json.
results: install ## prints the README's tables from metrics/
	@$(PY) -m pipeline.tools.report

results-write: install ## regenerates the tables between the markers in README.md and docs/results.md
	@$(PY) -m pipeline.tools.report --write

# Every MLflow run of the preset's experiment, and test accuracy per commit and DVC experiment (reports/compare.md).
compare: install ## every MLflow run as a table (reports/compare.md)
	$(PY) -m pipeline.tools.compare

# A thin alias of `dvc plots show` (or, with REVS="HEAD~1 my-exp", `dvc plots diff`): .dvc/config names the offline
# template .dvc/plots/offline.html, so dvc_plots/index.html works without internet (see pipeline/tools/plots.py).
plots: install ## dvc plots show (REVS="A B": dvc plots diff A B), offline: dvc_plots/index.html
	PATH="$(BIN):$$PATH" $(PY) -m pipeline.tools.plots $(REVS)

# MLflow's UI on this project's store. First prints the address of the preset's experiment's runs page
# (http://127.0.0.1:5000/#/experiments/<id>/runs?workflowType=machine_learning: the model-training workspace, not
# MLflow 3.17's default GenAI one), or, without a store, says to run the pipeline first.
STORE := sqlite:///$(CURDIR)/mlflow.db
ui: install ## prints the experiment's runs page, then starts mlflow ui on mlflow.db
	@MLFLOW_TRACKING_URI=$(STORE) $(PY) -m pipeline.tools.compare --ui
	$(BIN)/mlflow ui --backend-store-uri $(STORE)

# Class probabilities for your own images: make predict IMG="photo.jpg other.png" [ARGS="--model scratch --invert"]
predict: install ## class probabilities: make predict IMG="photo.jpg" [ARGS="--model scratch --invert"]
	$(PY) -m pipeline.tools.predict $(IMG) $(ARGS)

lint: install ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install ## ruff format, then ruff check --fix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Two workers, a test file each at a time: most of the suite's time is stage processes importing torch
# and MLflow (about 10 s each on 2 cores), which overlap well. The tests marked alone time real work against
# itself, which a second worker on the same 2 cores skews (the bf16 step probe read 1.83x, then 0.94x beside one
# on a Zen 4), so they run after the workers, by themselves.
test: install lint ## lint, then the whole suite in two workers (dvc repro end to end included), the timing tests alone
	PATH="$(BIN):$$PATH" pytest -n 2 --dist loadfile -m "not alone and not reliability and not study"
	PATH="$(BIN):$$PATH" pytest -m alone

# Whole tiny runs SIGKILLed at a dozen points and rerun, and four queued experiments on two workers beside a
# direct run: 6 to 9 minutes in all on 2 cores, so not in make test; CI runs them after it.
test-reliability: install ## the kill-anywhere and side-by-side tests (whole tiny runs, 6-9 min; CI runs them)
	PATH="$(BIN):$$PATH" pytest -m reliability tests/stages

# The opt-in studies' pipelines (studies/*/dvc.yaml) end to end on tiny fixtures: about 5 minutes, so not in make
# test (which stays under 15); CI runs them after make test-reliability.
test-studies: install ## the opt-in studies' dvc pipelines end to end on tiny fixtures (about 5 min; CI runs them)
	PATH="$(BIN):$$PATH" pytest -m study tests/stages

# The library's and tools' tests only: no stage processes, no dvc repro (tests/stages holds those).
test-unit: install lint ## lint, then the unit and tool tests only (tests/unit, tests/tools) in two workers
	PATH="$(BIN):$$PATH" pytest -n 2 -m "not e2e and not slow" tests/unit tests/tools

bench: install ## our ViT-B/16 against torchvision's (docs/benchmark.md)
	$(PY) benchmarks/bench_vit.py

bench-efficiency: install ## GFLOP/s of every model's training step against the matmul ceiling (docs/benchmark.md)
	$(PY) benchmarks/efficiency.py --profile

bench-compile: install ## eager against torch.compile on the curve's training step (docs/benchmark.md)
	$(PY) benchmarks/compile_step.py --reps 30

bench-start: install ## seconds from a stage process's start to its first optimiser step (docs/benchmark.md)
	$(PY) benchmarks/stage_start.py --reps 5

# A real mlflow ui and headless Chromium (installed from Debian's packages when missing): does make ui's address
# open the runs in the model-training workspace? Screenshots and DOMs in OUT (default: a temporary folder).
OUT ?= $(shell mktemp -d)
ui-check: install ## checks in headless Chromium that make ui's address opens the runs (screenshots in OUT)
	$(PY) benchmarks/mlflow_ui_check.py --out $(OUT)

# The CUDA paths in one command (benchmarks/gpu_check.py): throughput against torchvision, torchrun, the paper
# preset's stages on B/16 with legacy-named weights, the tiny pipeline through dvc repro, a rerun for determinism.
# At most --budget-s 540 s; on a GPU it writes metrics/gpu_check.json. E.g. make gpu-check ARGS="--checks e,d".
gpu-check: install ## the CUDA paths in one command, <= 9 min on one GPU (tiny on a CPU): metrics/gpu_check.json
	PATH="$(BIN):$$PATH" $(PY) benchmarks/gpu_check.py $(ARGS)

clean: ## removes .venv and the caches
	rm -rf $(VENV) .pytest_cache .ruff_cache
