#!/usr/bin/env bash
# Run the PostgreSQL half of the tests locally in one command (`make test-pg`): a
# throwaway cluster in a temporary folder on a free loopback port, pytest against it,
# the cluster stopped and removed whatever happens. Needs the PostgreSQL server binaries
# (Debian: apt-get install postgresql postgresql-contrib); as root the server runs as
# the `postgres` user. Extra arguments go to pytest (default: `-m pg`, the tests that
# need the server: see tests/conftest.py).
set -euo pipefail

cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"

scratch="$(mktemp -d)"
cleanup() {
    "$python" -m tests.support.pg stop "$scratch/pg" || true
    rm -rf "$scratch"
}
trap cleanup EXIT

url="$("$python" -m tests.support.pg start "$scratch/pg" auto)"
export HERMES_TEST_PG_URL="$url"
export HERMES_TEST_REQUIRE_PG=1
if [ "$#" -eq 0 ]; then
    set -- -m pg
fi
"$python" -m pytest -p no:cacheprovider "$@"
