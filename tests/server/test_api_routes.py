"""One door for the HTTP API: every /api/v1 route is listed in perfweb/api/urls.py, built from
its path in perfweb_contract.api, behind one auth path and one error mapping
(perfweb.api.endpoint)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from perfweb.api import urls as api_urls
from perfweb.api.endpoint import error_reply
from perfweb.diagnostics.quotas import QuotaExceeded
from perfweb.diagnostics.services import TraceConflict, TraceTooLarge
from perfweb.diagnostics.uploads import BadTrace
from perfweb.fleet.selectors import BadQuery
from perfweb.http.bodies import BadRequest
from perfweb.jobs.services import JobError, NotAllowed, StaleClaim
from perfweb.runs.fields import Invalid
from perfweb.runs.services import LauncherConflict, RunNotFound
from perfweb_contract import api

SAMPLE = {"run_id": "run-00000001", "trace_id": 7, "job_id": 9}
CONTRACT_PATHS = {
    name: template for name, template in vars(api).items()
    if name.endswith("_PATH") and template.startswith(api.API_PREFIX)
}  # fmt: skip


def all_routes(patterns: list[Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(route, pattern) of every URL pattern of the project, included ones too."""
    found: list[tuple[str, Any]] = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += all_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            found.append((route, pattern))
    return found


def test_every_api_route_is_listed_in_the_api_urlconf_and_comes_from_the_contract() -> None:
    routes = [(r, p) for r, p in all_routes(get_resolver().url_patterns) if r.startswith("api/")]
    listed = {id(pattern) for pattern in api_urls.urlpatterns}
    assert routes and all(id(pattern) in listed for _, pattern in routes)
    expected = {api_urls.PREFIX + api_urls.route(t) for t in CONTRACT_PATHS.values()}
    assert {route for route, _ in routes} == expected


@pytest.mark.parametrize("name", sorted(CONTRACT_PATHS))
def test_each_path_the_agent_builds_reaches_a_view_behind_the_one_door(name: str) -> None:
    match = resolve(CONTRACT_PATHS[name].format(**SAMPLE))
    method, auth = match.func.endpoint  # set by perfweb.api.endpoint.endpoint
    assert method in ("GET", "POST") and auth in ("token", "reader")
    assert {k: str(v) for k, v in match.kwargs.items()} == {
        k: str(v) for k, v in SAMPLE.items() if f"{{{k}}}" in CONTRACT_PATHS[name]
    }


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(CONTRACT_PATHS))
def test_each_route_asks_for_credentials_and_refuses_another_method(name: str) -> None:
    path = CONTRACT_PATHS[name].format(**SAMPLE)
    method, auth = resolve(path).func.endpoint
    client = Client()
    call = client.post if method == "POST" else client.get
    other = client.get if method == "POST" else client.post
    reply = call(path)
    assert reply.status_code == 401 and "error" in reply.json()
    assert reply["Server-Timing"].startswith("app;dur=")
    assert other(path).status_code == 405
    forged = call(path, HTTP_AUTHORIZATION="Bearer not-a-token")
    assert forged.status_code == 401


# Each app's errors and the status it says (perfweb.errors.ClientError): the door maps them all.
APP_ERRORS = [
    (Invalid, 400), (BadTrace, 400), (JobError, 400), (BadQuery, 400), (NotAllowed, 403),
    (RunNotFound, 404), (LauncherConflict, 409), (TraceConflict, 409), (StaleClaim, 409),
    (TraceTooLarge, 413), (QuotaExceeded, 413),
]  # fmt: skip


def test_it_maps_each_error_of_the_apps_to_one_status_and_sentence() -> None:
    for kind, status in APP_ERRORS:
        reply = error_reply(kind("run-00000001" if kind is RunNotFound else "why it failed"))
        assert reply is not None and reply.status_code == status
        if kind is not RunNotFound:
            assert reply.content == b'{"error":"why it failed"}'
    unknown = error_reply(RunNotFound("r1"))
    assert unknown is not None
    assert unknown.content == b'{"error":"run r1 was not started in this project"}'
    assert error_reply(BadRequest("too big", 413)).status_code == 413
    assert error_reply(JobError("no")).status_code == 400
    assert error_reply(NotAllowed("not yours")).status_code == NotAllowed.status
    assert error_reply(KeyError("a bug")) is None  # a 500 from Django's handler, logged
