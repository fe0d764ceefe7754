"""Writes for projects, memberships and ingest tokens."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from perfweb.db import first_statement
from perfweb.projects.models import IngestToken, Membership, Project

TOKEN_PREFIX = "pw_"
# last_used_at is a hint for people, not an audit log: write it at most once a minute so
# that ingest does not update the token row on every batch.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_digest(*, token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def project_create(*, name: str, owner: AbstractBaseUser | None = None) -> Project:
    project, _ = Project.objects.get_or_create(name=name)
    if owner is not None:
        Membership.objects.get_or_create(project=project, user=owner)
    return project


def membership_add(*, project: Project, user: AbstractBaseUser) -> Membership:
    membership, _ = Membership.objects.get_or_create(project=project, user=user)
    return membership


PROJECT_NAME_MAX = Project._meta.get_field("name").max_length or 100
USERNAME_MAX = 150


@transaction.atomic
def project_create_new(*, name: str, owner: AbstractBaseUser) -> Project:
    """A new project with `owner` as its first member. Unlike `project_create` (the
    bootstrap's idempotent one) a taken name is an error: joining a project by naming it
    would let anyone into anyone's project."""
    name = name.strip()
    if not name or len(name) > PROJECT_NAME_MAX:
        raise ValueError(f"a project name is 1 to {PROJECT_NAME_MAX} characters")
    if Project.objects.filter(name=name).exists():
        raise ValueError(f"a project named {name!r} exists already")
    project = Project.objects.create(name=name)
    Membership.objects.create(project=project, user=owner)
    return project


@transaction.atomic
def member_invite(*, project: Project, username: str) -> tuple[AbstractBaseUser, str | None]:
    """Makes `username` a member of the project. A person without an account gets one, with a
    password returned here once (to hand over; they change it with `manage.py changepassword`
    or the admin); an existing account keeps its password (None)."""
    username = username.strip()
    if not username or len(username) > USERNAME_MAX:
        raise ValueError(f"a user name is 1 to {USERNAME_MAX} characters")
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    password = None
    if user is None:
        password = secrets.token_urlsafe(12)
        user = user_model.objects.create_user(username=username, password=password)
    membership_add(project=project, user=user)
    return user, password


def token_create(*, project: Project, label: str = "", token: str | None = None) -> str:
    """Mints (or installs the given) token for the project and returns it: the only time it
    is seen in clear."""
    token = token or TOKEN_PREFIX + secrets.token_urlsafe(32)
    IngestToken.objects.create(
        project=project, label=label, prefix=token[:12], digest=token_digest(token=token)
    )
    return token


def token_revoke(*, token: IngestToken) -> None:
    IngestToken.objects.filter(id=token.id, revoked_at=None).update(revoked_at=timezone.now())


def token_authenticate(*, token: str) -> Project | None:
    """The project of a live token, or None for an unknown or revoked one. Every ingest call
    runs this first, hence one plain query, prepared, that checks the connection as well."""
    digest = token_digest(token=token)

    def read(cursor: CursorWrapper) -> tuple[Any, ...] | None:
        cursor.execute(
            f"SELECT t.id, t.last_used_at, p.id, p.name"
            f" FROM {IngestToken._meta.db_table} t JOIN {Project._meta.db_table} p"
            " ON p.id = t.project_id WHERE t.digest = %s AND t.revoked_at IS NULL",
            [digest],
        )
        return cursor.fetchone()

    row = first_statement(read)
    if row is None:
        return None
    token_id, last_used_at, project_id, name = row
    project = Project.from_db("default", ["id", "name"], [project_id, name])  # the rest deferred
    now = timezone.now()
    last_used_at = IngestToken._meta.get_field("last_used_at").to_python(last_used_at)
    if last_used_at is None or now - _aware(last_used_at) > LAST_USED_RESOLUTION:
        IngestToken.objects.filter(id=token_id).update(last_used_at=now)
    return project


def _aware(moment: datetime) -> datetime:
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


@transaction.atomic
def bootstrap(
    *, username: str, password: str, project_name: str, token: str | None = None
) -> tuple[Project, str]:
    """Idempotently creates the user, the project and the membership; installs `token`
    (when given and not installed yet) or mints a fresh one. Returns the project and token."""
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=username)
    if created or not user.check_password(password):
        user.set_password(password)
        user.save(update_fields=["password"])
    project = project_create(name=project_name, owner=user)
    if token is not None:
        existing = IngestToken.objects.filter(digest=token_digest(token=token)).first()
        if existing is not None and existing.project_id == project.id:
            if existing.revoked_at is not None:
                IngestToken.objects.filter(id=existing.id).update(revoked_at=None)
            return project, token
        if existing is not None:
            raise ValueError("that token belongs to another project")
    return project, token_create(project=project, label="bootstrap", token=token)
