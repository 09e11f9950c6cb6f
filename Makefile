# Developer shortcuts. `make test` is the README's test command; `make ci` is what CI runs.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test test-pg test-frameworks install lint format typecheck check ci clean

test:
	python3 -m venv $(VENV) && $(BIN)/pip install -e '.[dev]' && $(BIN)/python -m pytest

# The PostgreSQL tests in one command: a throwaway cluster, pytest with its URL, stopped
# after (scripts/test_pg.sh; needs the PostgreSQL server binaries).
test-pg:
	PYTHON=$(BIN)/python bash scripts/test_pg.sh

# The OpenAI Agents SDK's own session tests against HermesSession (fetches its sdist).
test-frameworks:
	framework_tests/openai_agents/run.sh $(BIN)/python

install:
	python3 -m venv $(VENV) && $(BIN)/pip install -e '.[dev]'

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format:
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

typecheck:
	$(BIN)/mypy

check: lint typecheck
	$(BIN)/python -m pytest

ci:
	bash .ci/run

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
