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
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$PERFWEB_PORT") 2>/dev/null; }
if listening; then
    echo "perfweb: port $PERFWEB_PORT is taken (is perfweb running already?);" \
        "another port: PERFWEB_PORT=8001 bash scripts/start.sh" >&2
    exit 1
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
  More tokens, other projects, your team: http://127.0.0.1:$PERFWEB_PORT/projects/
  Ctrl-C stops everything.

MSG

# Web, worker and beat run under honcho; the demo runs beside it. Each gets a session of its
# own, so a Ctrl-C reaches only this script, which then stops them in order: the demo first,
# while the web still takes its last batches and its finish, then honcho and its processes.
running() {  # alive and not yet a zombie
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}
label() {  # honcho's style of output line; it ends when the demo's output does, never before:
    trap '' INT TERM HUP  # a demo writing into a closed pipe would die mid-step
    local line
    while IFS= read -r line; do printf '%(%H:%M:%S)T %-8s | %s\n' -1 "$1" "$line"; done
}

stopping=""
trap 'stopping=yes' INT TERM HUP
setsid .venv/bin/honcho start -f Procfile &
honcho_pid=$!
for _ in $(seq 1 120); do  # the demo starts once the web listens (the agent would retry anyway)
    [ -z "$stopping" ] && running "$honcho_pid" || break
    listening && break
    sleep 0.5
done
demo_pid=""
if [ -z "$stopping" ] && running "$honcho_pid"; then
    setsid .venv/bin/perf-agent attach --name demo-cpu-training -- \
        .venv/bin/python examples/demo_train.py --minutes 30 \
        > >(label demo.1) 2>&1 &
    demo_pid=$!
fi

# Serve until asked to stop, or until honcho ends (it stops all when one of its processes exits).
while [ -z "$stopping" ] && running "$honcho_pid"; do
    wait "$honcho_pid" 2>/dev/null || true
done
trap '' INT TERM HUP
if [ -n "$stopping" ]; then
    echo "perfweb: stopping the demo run, then web, worker and beat"
else
    echo "perfweb: web, worker or beat ended (see above): stopping the demo run" >&2
fi
if [ -n "$demo_pid" ]; then
    kill -TERM "$demo_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do running "$demo_pid" || break; sleep 0.1; done
    kill -KILL -- "-$demo_pid" 2>/dev/null || true  # anything of the demo's left after 30 s
    wait "$demo_pid" 2>/dev/null || true
fi
# The worker first, by its own pid: a warm shutdown that finishes its tasks and ends its pool
# processes itself. honcho's stop signals each process group, so the pool processes would get
# SIGTERM too and die mid-task ("ForkPoolWorker-1 exited with signal 15"), and a worker still
# finishing after honcho's 5 s would be SIGKILLed. Tasks have time limits: this ends.
worker_pid=$(cat "$PERFWEB_DATA_DIR/celery-worker.pid" 2>/dev/null || true)
if [ -n "$worker_pid" ] && kill -TERM "$worker_pid" 2>/dev/null; then
    for _ in $(seq 1 600); do running "$worker_pid" || break; sleep 0.1; done
fi
kill -TERM "$honcho_pid" 2>/dev/null || true
wait "$honcho_pid" 2>/dev/null || true
[ -n "$stopping" ]  # stopped as asked: 0; a process of honcho's ended by itself: 1
