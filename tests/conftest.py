"""Shared fixtures: personas, a project with its token, and the rule for real servers.

Personas (healthchecks style): `owner` and `teammate` are members of `project`; `outsider`
is a member of `other_project` only. `token` and `other_token` are their ingest tokens.

Tests that need Redis, PostgreSQL or a real Celery worker call `require_server(...)`: under
CI=true a missing server fails the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

PASSWORD = "correct horse battery staple"
POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_server(name: str, host: str, port: int) -> None:
    """Fails (CI) or skips (elsewhere) the calling test when nothing listens on host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as error:
        message = f"{name} is not reachable on {host}:{port} ({error})"
    if in_ci():
        pytest.fail(f"{message}; CI=true requires it")
    pytest.skip(message)


def require_postgres() -> None:
    require_server("PostgreSQL", POSTGRES_HOST, POSTGRES_PORT)


def require_redis() -> None:
    require_server("Redis", REDIS_HOST, REDIS_PORT)


def _user(username: str) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=username, password=PASSWORD)


@pytest.fixture
def owner(db: None) -> Any:
    return _user("owner")


@pytest.fixture
def teammate(db: None) -> Any:
    return _user("teammate")


@pytest.fixture
def outsider(db: None) -> Any:
    return _user("outsider")


@pytest.fixture
def project(owner: Any, teammate: Any) -> Any:
    from perfweb.projects.services import membership_add, project_create

    project = project_create(name="vision", owner=owner)
    membership_add(project=project, user=teammate)
    return project


@pytest.fixture
def other_project(outsider: Any) -> Any:
    from perfweb.projects.services import project_create

    return project_create(name="speech", owner=outsider)


@pytest.fixture
def token(project: Any) -> str:
    from perfweb.projects.services import token_create

    return token_create(project=project, label="tests")


@pytest.fixture
def other_token(other_project: Any) -> str:
    from perfweb.projects.services import token_create

    return token_create(project=other_project, label="tests")


@pytest.fixture(autouse=True)
def _celery_runs_tasks_inline() -> Any:
    """Tasks enqueued by code under test run in the test process (tests of real workers
    start their own)."""
    from perfweb.celery import app

    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False
