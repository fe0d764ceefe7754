"""Who is calling: a project ingest token (`Authorization: Bearer …`) or a logged-in user."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from perfweb.http.bodies import error_response
from perfweb.projects.models import Project
from perfweb.projects.services import token_authenticate
from perfweb.runs.models import Run
from perfweb.runs.selectors import run_queryset

View = Callable[..., HttpResponse]


def bearer_project(request: HttpRequest) -> Project | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token_authenticate(token=token.strip())


def token_required(view: View) -> View:
    """Ingest: a live project token, else 401. The view gets `project=`."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        project = bearer_project(request)
        if project is None:
            return error_response("the Authorization header has no valid project token", 401)
        return view(request, *args, project=project, **kwargs)

    return wrapper


def runs_required(view: View) -> View:
    """Reads: a token or a logged-in session, else 401. The view gets `runs=`, the runs the
    caller may see."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        runs: QuerySet[Run]
        if "Authorization" in request.headers:
            project = bearer_project(request)
            if project is None:
                return error_response("the Authorization header has no valid project token", 401)
            runs = run_queryset(project=project)
        elif request.user.is_authenticated:
            runs = run_queryset(user=request.user)
        else:
            return error_response("log in or send a project token", 401)
        return view(request, *args, runs=runs, **kwargs)

    return wrapper
