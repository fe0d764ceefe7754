#!/usr/bin/env bash
# The test suite: installs what is missing into .venv, then runs pytest on parallel workers
# (pytest-xdist; extra arguments are passed through, e.g. `scripts/test.sh tests/server -x`,
# and `-n 0` runs in this process alone). PERFWEB_TEST_WORKERS sets the worker count; the
# default is one more than the cores (3 on 2 cores), which keeps every core busy while some
# tests wait on their subprocesses.
# Tests of PostgreSQL, Redis and the Celery worker use the local servers (127.0.0.1:5432 and
# :6379); browser tests use Debian's /usr/bin/chromium. With CI=true a missing one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh
# As if the environment were activated: the tests run `perf-agent` and `python` the way a
# user types them, and those must be this environment's.
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
workers="${PERFWEB_TEST_WORKERS:-$(($(nproc) + 1))}"
exec python -m pytest -n "$workers" --dist loadgroup "$@"
