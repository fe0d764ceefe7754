"""Every `/api/v1` route, and only here: each from its path in perfweb_contract.api (the agent
builds its requests from the same constants), each view behind perfweb.api.endpoint (one auth
path, one error mapping), each calling its own app's services and selectors."""

from __future__ import annotations

import re

from django.urls import URLPattern, path

from perfweb.api import diagnostics, fleet, ingest, jobs, read
from perfweb_contract import api

PREFIX = api.API_PREFIX.strip("/") + "/"  # what perfweb/urls.py includes this module under


def route(template: str) -> str:
    """A contract path as a route of this module: `/api/v1/runs/{run_id}` is `runs/<str:run_id>`."""
    relative = template.removeprefix(api.API_PREFIX + "/")
    return re.sub(r"\{(\w+)\}", lambda m: f"<{api.PARAMETERS[m.group(1)]}:{m.group(1)}>", relative)


urlpatterns: list[URLPattern] = [
    # the agent's (docs/protocol.md)
    path(route(api.START_PATH), ingest.start, name="ingest-start"),
    path(route(api.BATCH_PATH), ingest.batch, name="ingest-batch"),
    path(route(api.HEARTBEAT_PATH), ingest.heartbeat, name="ingest-heartbeat"),
    path(route(api.FINISH_PATH), ingest.finish, name="ingest-finish"),
    path(route(api.TRACE_PATH), diagnostics.trace_upload, name="ingest-trace"),
    # reads (docs/protocol.md)
    path(route(api.RUNS_PATH), read.runs, name="api-runs"),
    path(route(api.WASTE_PATH), fleet.waste, name="api-waste"),
    path(route(api.RUN_PATH), read.run, name="api-run"),
    path(route(api.RUN_SERIES_PATH), read.series, name="api-run-series"),
    path(route(api.RUN_TIMELINE_PATH), read.timeline, name="api-run-timeline"),
    path(route(api.RUN_FINDINGS_PATH), diagnostics.run_findings, name="run-findings"),
    path(route(api.RUN_STEP_BANDS_PATH), diagnostics.run_step_bands, name="run-step-bands"),
    path(route(api.RUN_TRACE_PATH), diagnostics.trace_download, name="trace-download"),
    path(route(api.RUN_WORKLOAD_PATH), diagnostics.run_workload, name="run-workload"),
    # the runner's (docs/jobs.md)
    path(route(api.JOBS_CLAIM_PATH), jobs.claim, name="api-job-claim"),
    path(route(api.JOB_PROGRESS_PATH), jobs.progress, name="api-job-progress"),
    path(route(api.JOB_RESULT_PATH), jobs.result, name="api-job-result"),
    path(route(api.JOB_FAIL_PATH), jobs.fail, name="api-job-fail"),
]
