"""Tokens & projects: a person's projects, their ingest tokens and their members.

Thin adapters over perfweb/projects/selectors.py and services.py. Every project here is one of
the user's own (another project's page or action is a 404); any member may mint and revoke
tokens and invite people, as any member may already read every run of the project.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from perfweb.projects import selectors, services
from perfweb.projects.models import Project


def _project(request: HttpRequest, project_id: int) -> Project:
    project = selectors.project_get_for_user(user=request.user, project_id=project_id)
    if project is None:
        raise Http404("No such project of yours.")
    return project


def _page(request: HttpRequest, *, status: int = 200, **shown: Any) -> HttpResponse:
    """The page, with whatever a POST has to show once (a new token, a new password, an
    error) beside the project it concerns."""
    projects = [
        {
            "project": project,
            "tokens": list(selectors.token_list(project=project)),
            "members": list(selectors.member_list(project=project)),
        }
        for project in selectors.project_list_for_user(user=request.user)
    ]
    return render(
        request,
        "projects/index.html",
        {"projects": projects, "server_url": request.build_absolute_uri("/").rstrip("/"), **shown},
        status=status,
    )


@require_GET
@login_required
def index(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@login_required
def project_new(request: HttpRequest) -> HttpResponse:
    try:
        project = services.project_create_new(name=request.POST.get("name", ""), owner=request.user)
    except ValueError as error:
        return _page(request, status=400, project_error=str(error))
    return redirect(reverse("projects:index") + f"#project-{project.id}")


@require_POST
@login_required
def token_new(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    label = request.POST.get("label", "").strip()[:100]
    token = services.token_create(project=project, label=label)
    # Rendered, not redirected: this answer is the only place the token is ever seen.
    return _page(request, new_token={"project_id": project.id, "label": label, "token": token})


@require_POST
@login_required
def token_revoke(request: HttpRequest, project_id: int, token_id: int) -> HttpResponse:
    project = _project(request, project_id)
    token = selectors.token_list(project=project).filter(id=token_id).first()
    if token is None:
        raise Http404("No such token in this project.")
    services.token_revoke(token=token)
    return redirect(reverse("projects:index") + f"#project-{project.id}")


@require_POST
@login_required
def member_invite(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    try:
        user, password = services.member_invite(
            project=project, username=request.POST.get("username", "")
        )
    except ValueError as error:
        return _page(
            request, status=400, member_error={"project_id": project.id, "text": str(error)}
        )
    return _page(
        request,
        invited={"project_id": project.id, "username": user.get_username(), "password": password},
    )
