"""The one door of every `/api/v1` view: method, auth, the apps' errors as a 4xx, timing.

    @endpoint("POST", auth=TOKEN)     # an agent or a runner: the view gets `project=`
    @endpoint("GET", auth=READER)     # a token or a logged-in member: the view gets `runs=`

A view parses its input, calls its app's services and returns; what the services raise is
turned into a status and one sentence here (ERRORS), the same for every route.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from perfweb.api.auth import runs_required, token_required
from perfweb.api.http import BadRequest, error_response, server_timing
from perfweb.diagnostics.quotas import QuotaExceeded
from perfweb.diagnostics.services import TraceConflict, TraceTooLarge
from perfweb.diagnostics.uploads import BadTrace
from perfweb.jobs.services import JobError
from perfweb.runs.fields import Invalid
from perfweb.runs.services import LauncherConflict, RunNotFound

View = Callable[..., HttpResponse]
TOKEN = "token"  # a live project token (Authorization: Bearer ...), else 401
READER = "reader"  # a project token or a logged-in session, scoped to the caller's runs
AUTH: dict[str, Callable[[View], View]] = {TOKEN: token_required, READER: runs_required}

# Exception -> status, for every /api/v1 route. BadRequest and JobError carry their own.
ERRORS: tuple[tuple[type[Exception], int], ...] = (
    (Invalid, 400),
    (BadTrace, 400),
    (RunNotFound, 404),
    (LauncherConflict, 409),
    (TraceConflict, 409),
    (TraceTooLarge, 413),
    (QuotaExceeded, 413),
)


def error_reply(error: Exception) -> HttpResponse | None:
    """The 4xx reply for an error the apps raise on bad or unfulfillable input; None for any
    other exception (a bug: Django's handler answers 500 and logs it)."""
    if isinstance(error, BadRequest | JobError):
        return error_response(str(error), error.status)
    if isinstance(error, RunNotFound):
        return error_response(f"run {error} was not started in this project", 404)
    for kind, status in ERRORS:
        if isinstance(error, kind):
            return error_response(str(error), status)
    return None


def endpoint(method: str, *, auth: str) -> Callable[[View], View]:
    """Wrap an API view: only `method`, authenticated by `auth` (TOKEN or READER), no CSRF for
    a POST (no cookies are involved: the token authenticates), errors mapped by ERRORS, and a
    `Server-Timing` header."""
    authenticate = AUTH[auth]

    def decorate(view: View) -> View:
        @wraps(view)
        def mapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except Exception as error:
                reply = error_reply(error)
                if reply is None:
                    raise
                return reply

        wrapped = require_http_methods([method])(authenticate(mapped))
        if method == "POST":
            wrapped = csrf_exempt(wrapped)
        timed = server_timing(wrapped)
        timed.endpoint = (method, auth)  # type: ignore[attr-defined]  # what the router test reads
        return timed

    return decorate
