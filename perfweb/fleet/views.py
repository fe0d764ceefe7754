"""`GET /metrics` with a project token: that project's live runs for Prometheus to scrape."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from perfweb.api.auth import bearer_project
from perfweb.api.http import error_response
from perfweb.fleet.exporter import exposition
from perfweb.fleet.snapshot import fleet_snapshot


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    project = bearer_project(request)
    if project is None:
        return error_response("send a project token: Authorization: Bearer <token>", 401)
    body = exposition(fleet_snapshot(project=project))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
