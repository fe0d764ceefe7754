"""Shared fixtures: personas, a project with its token, and the rule for real servers.

Personas (healthchecks style): `owner` and `teammate` are members of `project`; `outsider`
is a member of `other_project` only. `token` and `other_token` are their ingest tokens.

Tests that need Redis, PostgreSQL or a real Celery worker call tests/server/servers.py's
`require_postgres()` / `require_redis()`: under CI=true a missing server fails the test;
elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PASSWORD = "correct horse battery staple"
# The replay of operator fixes (perfweb_recommender.replay) starts a torch helper process
# per diagnosis: off in the suite, whose figures are the rules' measured/prior estimates;
# tests/recommender/test_replay.py turns it on where it is the subject.
os.environ.setdefault("PERFWEB_REPLAY", "0")
# What the agents of the suite's runs keep between runs (the CPU's probed peak, a default
# spill folder) stays in this session's folder, not in the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="perfweb-tests-cache-")


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


@pytest.fixture(autouse=True, scope="session")
def _passwords_hash_fast(django_test_environment: None) -> None:
    """Django's advice for test suites: a fast hasher. The default PBKDF2 takes 0.24 s of CPU
    per password here (a million rounds), and the personas and their logins hash several a
    test. Servers the tests start as processes keep the real hasher."""
    from django.conf import settings
    from django.contrib.auth import hashers

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()


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


# --- parallel runs (pytest-xdist, scripts/test.sh) ---------------------------------------
# Chromium is cheap to start on each worker; the rest of the suite's module- and
# session-scoped fixtures start servers, stacks or attached runs.
CHEAP_SHARED_FIXTURES = {"browser", "screenshot_dir", "_passwords_hash_fast"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that share an expensive fixture (module- or session-scoped: a server stack, an
    attached run) go to one xdist worker, which builds it once; all others spread freely
    (`--dist loadgroup`)."""
    for item in items:
        group = _shared_fixture_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _shared_fixture_of(item: pytest.Item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        if name in CHEAP_SHARED_FIXTURES or not info.name2fixturedefs.get(name):
            continue
        # the definition the test gets: the closest one (a module's fixture may override a
        # conftest's of the same name, e.g. test_replay.py's `recorded`)
        fixturedef = info.name2fixturedefs[name][-1]
        if not _ours(fixturedef.baseid):
            continue
        if fixturedef.scope == "module":
            # every module-scoped fixture lives once per module: its tests go together,
            # whichever of its fixtures each test names first
            return f"module:{item.nodeid.split('::')[0]}"
        if fixturedef.scope == "session":  # a conftest's: one per worker
            return f"{name}@{fixturedef.baseid}"
    return None


def _ours(baseid: str) -> bool:
    return baseid.startswith("tests")


# --- where the suite's time goes ----------------------------------------------------------
# Summed over every test's setup, call and teardown, per folder of tests: on parallel workers
# the sum is larger than the wall time, which the closing line gives.
_SECONDS_PER_FOLDER: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    folder = "/".join(report.nodeid.split("::")[0].split("/")[:2])
    _SECONDS_PER_FOLDER[folder] = _SECONDS_PER_FOLDER.get(folder, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if len(_SECONDS_PER_FOLDER) < 2:
        return
    terminalreporter.section("seconds per folder of tests (setup + call + teardown)")
    for folder, seconds in sorted(_SECONDS_PER_FOLDER.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {folder}")
