# `make install` then `make test`; `make bench` measures; see README.md.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA ?= ../shared/data
# CPU wheel of torch: an unpinned torch would pull gigabytes of CUDA wheels.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install test lint bench clean

install: $(BIN)/mt

$(BIN)/mt: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e ".[dev,plot,export]"
	@touch $@

test: install
	HF_DATASETS_OFFLINE=1 $(BIN)/pytest

lint: install
	$(BIN)/ruff check mt tests scripts
	$(BIN)/ruff format --check mt tests scripts

bench: install
	$(BIN)/python scripts/bench.py --data $(DATA)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache  # never runs/: it holds trained models
