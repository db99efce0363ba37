# The two front-door commands: `make train` and `make test`.
# Both do their own set-up: a virtualenv in .venv, the package with its
# dependencies, and the Ding corpus (Debian package trans-de-en).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRAIN_ARGS ?=
TEST_ARGS ?=

.PHONY: setup corpus train test clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,wmt]"
	touch $(STAMP)

corpus: $(STAMP)
	$(BIN)/python -m keras_attn_zoo.data.ding

setup: $(STAMP) corpus

## Train the small Transformer on Ding de->en, evaluate with beam 4, export.
train: setup
	$(BIN)/python recipes/train_wmt.py $(TRAIN_ARGS)

## Run the test suite (under 15 minutes on 2 cores).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(TEST_ARGS)

clean:
	rm -rf runs saved_models/*/ .pytest_cache
