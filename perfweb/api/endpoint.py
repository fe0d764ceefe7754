"""The one door of every `/api/v1` view: method, auth, the apps' errors as a 4xx, timing.

    @endpoint("POST", auth=TOKEN)     # an agent or a runner: the view gets `project=`
    @endpoint("GET", auth=READER)     # a token or a logged-in member: the view gets `runs=`

A view parses its input, calls its app's services and returns; what the services raise on
bad input (`perfweb.errors.ClientError`, with its own status) becomes that status and one
sentence here, the same for every route: the door knows no app's errors.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from perfweb.errors import ClientError
from perfweb.http.auth import runs_required, token_required
from perfweb.http.bodies import error_response, server_timing

View = Callable[..., HttpResponse]
TOKEN = "token"  # a live project token (Authorization: Bearer ...), else 401
READER = "reader"  # a project token or a logged-in session, scoped to the caller's runs
AUTH: dict[str, Callable[[View], View]] = {TOKEN: token_required, READER: runs_required}


def error_reply(error: Exception) -> HttpResponse | None:
    """The 4xx reply for an error the apps raise on bad or unfulfillable input (a
    `perfweb.errors.ClientError`: each says its status and sentence); None for any other
    exception (a bug: Django's handler answers 500 and logs it)."""
    if isinstance(error, ClientError):
        return error_response(error.sentence(), error.status)
    return None


def endpoint(method: str, *, auth: str) -> Callable[[View], View]:
    """Wrap an API view: only `method`, authenticated by `auth` (TOKEN or READER), no CSRF for
    a POST (no cookies are involved: the token authenticates), errors mapped by error_reply, and a
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
