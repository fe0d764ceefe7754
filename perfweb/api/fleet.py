"""The fleet's read endpoint (`GET /api/v1/waste`, docs/protocol.md), the waste page's twin:
parse the query, call the report, reply. Routed by perfweb/api/urls.py; a bad query is the
fleet's BadQuery, a 400 by perfweb.api.endpoint."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from perfweb.api.endpoint import READER, endpoint
from perfweb.fleet.selectors import waste_query, waste_report
from perfweb.http.bodies import json_response
from perfweb.runs.models import Run


@endpoint("GET", auth=READER)
def waste(request: HttpRequest, *, runs: QuerySet[Run]) -> HttpResponse:
    runs, window, tag = waste_query(request.GET, runs)
    return json_response(waste_report(runs=runs, window=window, now=timezone.now(), tag=tag))
