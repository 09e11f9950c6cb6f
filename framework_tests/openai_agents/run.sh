#!/usr/bin/env bash
# The OpenAI Agents SDK's own session tests, run against HermesSession.
#
#   framework_tests/openai_agents/run.sh [PYTHON]
#
# PYTHON (default: python3) is an interpreter with hermes_repo installed with its dev
# extra (openai-agents, pytest-asyncio). The SDK's source distribution, which carries
# its tests, is fetched from the package index for the version the plugin was audited
# against, unpacked in a scratch folder and its two session test modules run with
# hermes_swap.py loaded: SQLiteSession is HermesSession there. The tests that read
# SQLiteSession's internals are reported as skipped, each with its reason.
set -euo pipefail

python="$(command -v "${1:-python3}")"
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's/^AUDITED_VERSION = "\(.*\)"$/\1/p' "$here/hermes_swap.py")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary :all: --dest "$work" "openai-agents==$version"
tar -xzf "$work/openai_agents-$version.tar.gz" -C "$work"
cd "$work/openai_agents-$version"
# The SDK's pytest settings (asyncio mode) come from its pyproject.toml; its package is
# the installed one (its sources are under src/, not on the path).
PYTHONPATH="$here" "$python" -m pytest -p hermes_swap -p no:cacheprovider -rs \
    tests/memory/test_session.py tests/memory/test_session_limit.py
