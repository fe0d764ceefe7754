"""`POST /api/v1/ingest/trace`, `GET /api/v1/runs/<run_id>/findings`,
`GET /api/v1/runs/<run_id>/traces/<id>` (the stored file) and
`GET /api/v1/runs/<run_id>/workload`: parse, call one diagnostics function, reply
(docs/protocol.md). Routed by perfweb/api/urls.py; errors are mapped by perfweb.api.endpoint."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import FileResponse, HttpRequest, HttpResponse

from perfweb.api.endpoint import READER, TOKEN, endpoint
from perfweb.diagnostics import conf, selectors, services, workload
from perfweb.diagnostics.anatomy import phase_bands
from perfweb.diagnostics.schemas import parse_trace_chunk
from perfweb.diagnostics.step_bands import step_bands
from perfweb.diagnostics.uploads import TRACE_SUFFIX
from perfweb.http.bodies import error_response, json_response, read_json
from perfweb.projects.models import Project
from perfweb.runs.models import Run
from perfweb.runs.selectors import agent_commands, run_get
from perfweb_contract.protocol import MAX_BODY_BYTES


@endpoint("POST", auth=TOKEN)
def trace_upload(request: HttpRequest, *, project: Project) -> HttpResponse:
    # A chunk's body unzipped is no larger than one sent plain: its data is base64 of gzip.
    chunk = parse_trace_chunk(read_json(request, unzipped_max=MAX_BODY_BYTES))
    result = services.trace_chunk_store(project=project, chunk=chunk)
    run = Run(run_id=chunk.run_id, project=project)
    commands = agent_commands(run=run, agent_id=chunk.agent_id)
    return json_response({"ok": True, "complete": result.complete, "commands": commands})


@endpoint("GET", auth=READER)
def run_findings(request: HttpRequest, run_id: str, *, runs: QuerySet[Run]) -> HttpResponse:
    run = run_get(runs=runs, run_id=run_id)
    if run is None:
        return error_response("no such run", 404)
    return json_response(selectors.run_findings_json(run=run))


@endpoint("GET", auth=READER)
def trace_download(
    request: HttpRequest, run_id: str, trace_id: int, *, runs: QuerySet[Run]
) -> HttpResponse:
    """The trace as the agent uploaded it: gzip Kineto JSON, which Perfetto, chrome://tracing,
    TensorBoard and HTA open as it is (so it is sent as a file, not with Content-Encoding)."""
    run = run_get(runs=runs, run_id=run_id)
    trace = selectors.trace_get(run=run, trace_id=trace_id) if run is not None else None
    if run is None or trace is None:
        return error_response("no such trace", 404)
    try:
        handle = (conf.trace_dir() / trace.path).open("rb")
    except OSError:
        return error_response("the trace file is no longer on the server", 410)
    filename = f"{run.run_id}-{trace.name}{TRACE_SUFFIX}"
    response = FileResponse(handle, as_attachment=True, filename=filename)
    response["Content-Type"] = "application/gzip"
    response["Cache-Control"] = "private, max-age=3600"
    return response


@endpoint("GET", auth=READER)
def run_step_bands(request: HttpRequest, run_id: str, *, runs: QuerySet[Run]) -> HttpResponse:
    """The run's step times as a rolling median with its p10–p90 band, per rank."""
    run = run_get(runs=runs, run_id=run_id)
    if run is None:
        return error_response("no such run", 404)
    return json_response(
        {"run": run.run_id, "bands": step_bands(run=run), "phases": phase_bands(run=run)}
    )


@endpoint("GET", auth=READER)
def run_workload(request: HttpRequest, run_id: str, *, runs: QuerySet[Run]) -> HttpResponse:
    run = run_get(runs=runs, run_id=run_id)
    if run is None:
        return error_response("no such run", 404)
    return json_response(workload.run_workload_json(run=run))
