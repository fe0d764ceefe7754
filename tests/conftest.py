"""Shared fixtures: personas, a project with its token, and the rule for real servers.

Personas (healthchecks style): `owner` and `teammate` are members of `project`; `outsider`
is a member of `other_project` only. `token` and `other_token` are their ingest tokens.

Tests that need Redis, PostgreSQL or a real Celery worker call tests/server/servers.py's
`require_postgres()` / `require_redis()`: under CI=true a missing server fails the test;
elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PASSWORD = "correct horse battery staple"


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


@pytest.fixture(autouse=True)
def _ingest_forgets_the_ids_it_read() -> Any:
    """The ingest path remembers runs' and series' ids, which are never reused in a real
    database; a test database rolled back reuses them."""
    from perfweb.ingest.batches import known_ids

    known_ids.clear()
    yield
    known_ids.clear()


# --- the one headless Chromium of the test session ---------------------------------------
# Playwright's sync API allows one running instance per thread: every browser test shares it.
CHROMIUM = Path(os.environ.get("PERFWEB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(reason: str) -> None:
    """Skip outside CI; under CI=true what the suite needs must be there, so fail."""
    if in_ci():
        pytest.fail(f"{reason} (required under CI=true)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's Chromium through Playwright (never a downloaded browser), headless."""
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright Python package is not installed")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()
