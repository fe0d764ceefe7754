"""Django's request handling, with the agents' timed endpoints called straight.

Every rank of every run posts a batch every few seconds, and each batch is a few
milliseconds of work. Django's middleware (static files, sessions, CSRF, auth, messages,
security headers) and its URL resolver do nothing for these endpoints, which are
CSRF-exempt, token-authenticated and answer JSON to a program, yet they cost about a tenth
of a batch's time. So the paths below skip them and call their view directly. Everything
else Django's handler does stays: the request_started and request_finished signals (which
manage database connections), the WSGIRequest, the ALLOWED_HOSTS check, the response for
an exception (with its log and got_request_exception signal) and the log line of a 4xx or
5xx.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import response_for_exception
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse
from django.urls import resolve, reverse, set_urlconf
from django.utils.log import log_response

# URL names of the endpoints an agent posts on a timer (start and finish are once a run).
DIRECT = ("ingest-batch", "ingest-heartbeat")


class DirectViews(BaseHandler):
    """A handler mixin: requests for DIRECT's paths go to their views without middleware."""

    _direct: dict[str, Callable[[HttpRequest], HttpResponse]] | None = None

    def get_response(self, request: HttpRequest) -> HttpResponse:
        view = self._direct_views().get(request.path_info)
        if view is None:
            return super().get_response(request)
        set_urlconf(settings.ROOT_URLCONF)
        try:
            request.get_host()  # DisallowedHost, as CommonMiddleware would raise it
            response = view(request)
        except Exception as error:  # noqa: BLE001 - Django's own handler catches everything
            response = response_for_exception(request, error)
        response._resource_closers.append(request.close)
        if response.status_code >= 400:
            log_response(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )
        return response

    def _direct_views(self) -> dict[str, Callable[[HttpRequest], HttpResponse]]:
        if self._direct is None:
            views = {}
            for name in DIRECT:
                path = reverse(name)
                views[path] = resolve(path).func
            self._direct = views
        return self._direct


class Handler(DirectViews, WSGIHandler):
    """perfweb.wsgi's application."""
