# The two front-door commands: `make train` and `make test`.
# Both do their own set-up: a virtualenv in .venv, the package with its
# dependencies, and the Ding corpus (Debian package trans-de-en).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRAIN_ARGS ?=
TEST_ARGS ?=

.PHONY: setup test-setup corpus browser train test benchmark-smoke leaderboard clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,wmt]"
	touch $(STAMP)

# Installs the Ding dictionary (apt, else the upstream download) and prints its counts;
# the library only reads it.
corpus: $(STAMP)
	$(BIN)/python scripts/install_ding_corpus.py

# The server test drives the page in a real headless Chromium (Debian packages).
browser:
	@if [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }; \
	  else echo "Install Debian's chromium and chromium-driver for the browser test."; fi; \
	fi

setup: $(STAMP) corpus

# The tests' set-up: Chromium's packages install while pip fills the virtualenv
# (on a fresh machine about 30 s of apt beside pip's 100-130 s), then the corpus,
# whose apt-get must not run beside Chromium's (one dpkg lock).
test-setup:
	@$(MAKE) --no-print-directory -j 2 $(STAMP) browser
	@$(MAKE) --no-print-directory corpus

## Train the small Transformer on Ding de->en, evaluate with beam 4, export.
## bf16 where the CPU or GPU multiplies it natively (docs/training.md); the length
## penalty chosen on the valid split (1.0 beat 0.6 in all 14 valid grids:
## docs/measurements.md); TRAIN_ARGS win.
train: setup
	$(BIN)/python recipes/train_wmt.py --mixed-precision auto --length-penalty-choices 0.6,1.0 $(TRAIN_ARGS)

## Run the test suite (under 15 minutes on 2 cores).
test: test-setup
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 -m "not benchmark_smoke" $(TEST_ARGS)

## Run every benchmark in smoke mode (about 5 minutes on 2 cores).
benchmark-smoke: setup
	$(BIN)/python -m pytest -q -m benchmark_smoke tests/test_benchmarks.py

## Fill the leaderboard cell by cell, each trained to convergence under the same cap
## (resumable; hours on 2 cores), then write its table, verdicts and plots into
## docs/leaderboard.md. LEADERBOARD_ARGS: e.g. --seeds 0, or --jobs 2 (two cells at
## once, a process each on its own core); the committed 2,000-step
## table: --report-only --protocol fixed --steps 2000.
LEADERBOARD_ARGS ?=
leaderboard: setup
	$(BIN)/python recipes/leaderboard.py --readme docs/leaderboard.md $(LEADERBOARD_ARGS)

clean:
	rm -rf runs saved_models/*/ .pytest_cache
