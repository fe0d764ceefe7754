"""The read API (docs/protocol.md): runs, a run, its series, its whole timeline."""

from __future__ import annotations

import math

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from perfweb.api.endpoint import READER, endpoint
from perfweb.diagnostics.workload import run_rows_with_coverage
from perfweb.http.bodies import error_response, json_response
from perfweb.runs.models import Run
from perfweb.runs.selectors import run_get
from perfweb.series.run_rows import run_detail, run_list
from perfweb.series.selectors import series_read
from perfweb_contract.protocol import DEVICE_RE, METRIC_NAME_RE, RUN_STATUSES

MAX_POINTS = 10_000
MIN_POINTS = 3


class _BadQuery(Exception):
    pass


@endpoint("GET", auth=READER)
def runs(request: HttpRequest, *, runs: QuerySet[Run]) -> HttpResponse:
    status = request.GET.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        return error_response(f"status is not one of {', '.join(RUN_STATUSES)}", 400)
    try:
        limit = _integer(request, "limit", default=50, low=1, high=500)
    except _BadQuery as error:
        return error_response(str(error), 400)
    rows = run_list(runs=runs, status=status, limit=limit)
    return json_response({"runs": run_rows_with_coverage(rows=rows, runs=runs)})


@endpoint("GET", auth=READER)
def run(request: HttpRequest, run_id: str, *, runs: QuerySet[Run]) -> HttpResponse:
    found = run_get(runs=runs, run_id=run_id)
    if found is None:
        return error_response("no such run", 404)
    return json_response(run_detail(run=found))


@endpoint("GET", auth=READER)
def series(request: HttpRequest, run_id: str, *, runs: QuerySet[Run]) -> HttpResponse:
    return _series(request, run_id, runs=runs, everything=False)


@endpoint("GET", auth=READER)
def timeline(request: HttpRequest, run_id: str, *, runs: QuerySet[Run]) -> HttpResponse:
    return _series(request, run_id, runs=runs, everything=True)


def _series(
    request: HttpRequest, run_id: str, *, runs: QuerySet[Run], everything: bool
) -> HttpResponse:
    found = run_get(runs=runs, run_id=run_id)
    if found is None:
        return error_response("no such run", 404)
    try:
        start, end = _time(request, "start"), _time(request, "end")
        points = _integer(request, "points", default=1000, low=MIN_POINTS, high=MAX_POINTS)
    except _BadQuery as error:
        return error_response(str(error), 400)
    names = None if everything else request.GET.getlist("name")
    if not everything and not names:
        return error_response("name is missing (give one or more ?name=)", 400)
    devices = None if everything else request.GET.getlist("device") or None
    for key, values, pattern in (("name", names, METRIC_NAME_RE), ("device", devices, DEVICE_RE)):
        if any(not pattern.fullmatch(value) for value in values or ()):
            return error_response(f"{key} is not a {key} of the protocol ({pattern.pattern})", 400)
    result = series_read(
        run=found, names=names, devices=devices, start=start, end=end, points=points
    )
    starts = [s.t[0] for s in result if len(s.t)]
    ends = [s.t[-1] for s in result if len(s.t)]
    return json_response(
        {
            "run": found.run_id,
            "start": start if start is not None else (min(starts) if starts else None),
            "end": end if end is not None else (max(ends) if ends else None),
            "series": [s.as_json() for s in result],
        }
    )


def _time(request: HttpRequest, key: str) -> float | None:
    raw = request.GET.get(key, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise _BadQuery(f"{key} is not a number of Unix seconds") from None
    if not math.isfinite(value):
        raise _BadQuery(f"{key} is not a number of Unix seconds")
    return value


def _integer(request: HttpRequest, key: str, *, default: int, low: int, high: int) -> int:
    raw = request.GET.get(key, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise _BadQuery(f"{key} is not an integer from {low} to {high}")
    return int(raw)
