"""Every path of the HTTP API (docs/protocol.md, docs/jobs.md), in one place.

The agent builds its requests from these and the server's one router (perfweb/api/urls.py)
builds its routes from them, so a path cannot drift between the two sides. A `{name}` in a
path is filled in with `str.format` by a client; PARAMETERS says what each one holds, which
the server turns into its URL converters.
"""

from __future__ import annotations

API_PREFIX = "/api/v1"

# What a `{name}` in a path holds: "str" (one path segment) or "int" (ASCII digits).
PARAMETERS = {"run_id": "str", "trace_id": "int", "job_id": "int"}

# The agent's (docs/protocol.md): project token, POST, JSON bodies (gzip allowed).
START_PATH = f"{API_PREFIX}/ingest/start"
BATCH_PATH = f"{API_PREFIX}/ingest/batch"
HEARTBEAT_PATH = f"{API_PREFIX}/ingest/heartbeat"
FINISH_PATH = f"{API_PREFIX}/ingest/finish"
TRACE_PATH = f"{API_PREFIX}/ingest/trace"  # chunked profiler-trace upload (docs/protocol.md)

# The read API: a project token or a logged-in session, GET.
RUNS_PATH = f"{API_PREFIX}/runs"
RUN_PATH = f"{API_PREFIX}/runs/{{run_id}}"
RUN_SERIES_PATH = f"{RUN_PATH}/series"
RUN_TIMELINE_PATH = f"{RUN_PATH}/timeline"
RUN_FINDINGS_PATH = f"{RUN_PATH}/findings"
RUN_STEP_BANDS_PATH = f"{RUN_PATH}/steps/bands"
RUN_TRACE_PATH = f"{RUN_PATH}/traces/{{trace_id}}"  # the stored file, gzip Kineto JSON
RUN_WORKLOAD_PATH = f"{RUN_PATH}/workload"
WASTE_PATH = f"{API_PREFIX}/waste"

# The runner's (docs/jobs.md): project token, POST, JSON bodies.
JOBS_CLAIM_PATH = f"{API_PREFIX}/jobs/claim"
JOB_PROGRESS_PATH = f"{API_PREFIX}/jobs/{{job_id}}/progress"
JOB_RESULT_PATH = f"{API_PREFIX}/jobs/{{job_id}}/result"
JOB_FAIL_PATH = f"{API_PREFIX}/jobs/{{job_id}}/fail"
