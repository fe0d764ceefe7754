#!/usr/bin/env bash
# One command to run the whole product on a fresh machine (Python 3.11 and nothing else):
# a virtual environment, the install, the database, a demo user/project/token, then web +
# Celery worker + beat + a demo CPU training run under `perf-agent attach`, together.
# SQLite and an embedded Celery broker are used unless DATABASE_URL / REDIS_URL are set.
# Ctrl-C stops every process it started. Running it again reuses what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
export PERFWEB_DATA_DIR="${PERFWEB_DATA_DIR:-$PWD/.data}"
export PERFWEB_PORT="${PERFWEB_PORT:-8000}"
export DEBUG="${DEBUG:-true}"
export PYTHONUNBUFFERED=1
mkdir -p "$PERFWEB_DATA_DIR"

if [ ! -x .venv/bin/python ]; then
    echo "perfweb: creating the virtual environment in .venv"
    "$PYTHON" -m venv .venv
fi
# Reinstall only when the dependency list changed since the last start.
stamp="$PERFWEB_DATA_DIR/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "perfweb: installing (torch 2.13.0 CPU for the demo, then the project)"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q torch==2.13.0
    .venv/bin/python -m pip install -q -e '.[all]'
    rm -f "$PERFWEB_DATA_DIR"/.installed-*
    touch "$stamp"
fi

.venv/bin/python manage.py migrate --no-input -v 0
token_line=$(.venv/bin/python manage.py bootstrap --user demo --password demo --project demo \
    --token-file "$PERFWEB_DATA_DIR/demo-token" | grep '^token=')
export PERF_AGENT_TOKEN="${token_line#token=}"
export PERF_AGENT_SERVER="http://127.0.0.1:$PERFWEB_PORT"

cat <<MSG

  perfweb is starting: http://127.0.0.1:$PERFWEB_PORT/
  log in as demo / demo — a demo CPU training run is streaming into it.
  Attach your own script:  .venv/bin/perf-agent attach --server $PERF_AGENT_SERVER \\
                               --token $PERF_AGENT_TOKEN -- python train.py
  Ctrl-C stops everything.

MSG
exec .venv/bin/honcho start -f Procfile
