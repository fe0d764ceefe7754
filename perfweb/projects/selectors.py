"""Reads for projects: which projects a person may see."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import F, QuerySet

from perfweb.projects.models import IngestToken, Membership, Project


def project_list_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(memberships__user=user).order_by("name")


def project_get_for_user(
    *, user: AbstractBaseUser | AnonymousUser, project_id: int
) -> Project | None:
    return project_list_for_user(user=user).filter(id=project_id).first()


def token_list(*, project: Project) -> QuerySet[IngestToken]:
    """The project's tokens, live ones first, newest first."""
    return IngestToken.objects.filter(project=project).order_by(
        F("revoked_at").asc(nulls_first=True), "-created_at"
    )


def member_list(*, project: Project) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    )
