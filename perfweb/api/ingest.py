"""The agents' endpoints (docs/protocol.md): parse, call one service, reply."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse

from perfweb.api.endpoint import TOKEN, endpoint
from perfweb.http.bodies import json_response, parse_json, read_body
from perfweb.ingest.batches import batch_store
from perfweb.projects.models import Project
from perfweb.runs import services
from perfweb.runs.models import Run
from perfweb.runs.schemas import (
    parse_batch,
    parse_batch_json,
    parse_finish,
    parse_heartbeat,
    parse_start,
)
from perfweb.runs.selectors import agent_commands
from perfweb_contract import protocol

# What this server reads beyond protocol v1's first form (docs/protocol.md, "Features").
FEATURES = [protocol.FEATURE_PACKED_ARRAYS]


def ingest_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """POST only, token auth (perfweb.api.endpoint); the view gets the body's bytes,
    un-gzipped; bad input is a 4xx with one sentence, an unknown run a 404, a second
    launcher a 409."""

    @endpoint("POST", auth=TOKEN)
    @wraps(view)
    def wrapper(request: HttpRequest, *, project: Project) -> HttpResponse:
        return view(read_body(request), project=project)

    return wrapper


def _reply(target: Run, agent_id: str, **extra: Any) -> HttpResponse:
    commands = agent_commands(run=target, agent_id=agent_id)
    return json_response({"ok": True, **extra, "commands": commands})


@ingest_view
def start(body: bytes, *, project: Project) -> HttpResponse:
    request = parse_start(parse_json(body))
    run = services.run_start(project=project, request=request)
    return _reply(
        run,
        request.agent_id,
        run={"id": run.run_id, "url": f"/runs/{run.run_id}/"},
        features=FEATURES,
    )


@ingest_view
def batch(body: bytes, *, project: Project) -> HttpResponse:
    # Well-formed batches decode straight into typed lists; anything else is parsed again
    # generically so that the answer names the first bad field.
    request = parse_batch_json(body) or parse_batch(parse_json(body))
    result = batch_store(project=project, request=request)
    run = Run(run_id=request.run_id, project=project)
    return _reply(
        run,
        request.agent_id,
        duplicate=result.duplicate,
        stored={"samples": result.samples, "steps": result.steps},
    )


@ingest_view
def heartbeat(body: bytes, *, project: Project) -> HttpResponse:
    request = parse_heartbeat(parse_json(body))
    services.run_heartbeat(
        project=project, run_id=request.run_id, agent_id=request.agent_id, unsent=request.unsent
    )
    return _reply(Run(run_id=request.run_id, project=project), request.agent_id)


@ingest_view
def finish(body: bytes, *, project: Project) -> HttpResponse:
    request = parse_finish(parse_json(body))
    run = services.run_finish(project=project, request=request)
    return _reply(run, request.agent_id, status=run.status)
