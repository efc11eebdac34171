# Axon: `make demo` runs the main job on the embedded defaults, `make test` runs the test suite.
# Both set up .venv first when needed (Python >= 3.10 on PATH as python3).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.axon-installed

.PHONY: setup test test-fast lint demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# the habits: formatting, lint, types, the layers contract; then the tests and doctests
lint: setup
	$(BIN)/ruff format --check axon tests experiments examples
	$(BIN)/ruff check axon tests experiments examples
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	OMP_NUM_THREADS=1 $(BIN)/pytest -q -n 2 --dist worksteal

test-fast: setup
	OMP_NUM_THREADS=1 $(BIN)/pytest -q -n 2 --dist worksteal -m "not slow"

demo: setup
	OMP_NUM_THREADS=1 $(BIN)/python -m axon.demo

clean:
	rm -rf $(VENV) .axon .pytest_cache
