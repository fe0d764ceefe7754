#!/usr/bin/env bash
# One command to run the whole product on a fresh machine (Python 3.11 and nothing else):
# a virtual environment, the install, the database, a demo user/project/token, then web +
# Celery worker + beat + a demo CPU training run under `perf-agent attach`, together.
# SQLite and an embedded Celery broker are used unless DATABASE_URL / REDIS_URL are set.
# Ctrl-C stops every process it started. Running it again reuses what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/install.sh
export PERFWEB_PORT="${PERFWEB_PORT:-8000}"
export DEBUG="${DEBUG:-true}"
export PYTHONUNBUFFERED=1

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
