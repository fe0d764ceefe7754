"""The ingest and model tests, again against the local PostgreSQL server.

The suite's default database is SQLite; this runs the modules that talk to the database most
(ingest, ingest under concurrency, lifecycle, storage, read API) in a pytest subprocess with
DATABASE_URL pointing at 127.0.0.1:5432 (trust auth), and the hostile-input tests and the
fuzz test in another (each well under its time limit). Under CI=true a missing server
fails; elsewhere it skips.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .servers import POSTGRES_HOST, POSTGRES_PORT, require_postgres

ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    "test_ingest.py",
    "test_ingest_concurrency.py",
    "test_lifecycle.py",
    "test_storage.py",
    "test_read_api.py",
    "test_scalars.py",
    "test_handlers.py",
    "test_on_postgresql.py",
]
HOSTILE_MODULES = ["test_hostile_input.py", "test_fuzz.py"]


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_it_passes_the_ingest_and_model_tests_on_postgresql() -> None:
    _passes_on_postgresql(MODULES, name=f"perfweb_{os.getpid()}")


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_it_passes_the_hostile_input_and_fuzz_tests_on_postgresql() -> None:
    _passes_on_postgresql(HOSTILE_MODULES, name=f"perfweb_hostile_{os.getpid()}")


def _passes_on_postgresql(modules: list[str], *, name: str) -> None:
    require_postgres()
    # pytest-django creates (and drops) test_<name>: unique per run, as others share the server.
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{name}",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--create-db",
            *(str(Path(__file__).parent / module) for module in modules),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.splitlines()[-1]
