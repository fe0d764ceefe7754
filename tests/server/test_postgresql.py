"""The ingest and model tests, again against the local PostgreSQL server.

The suite's default database is SQLite; this runs the modules that talk to the database most
(ingest, ingest under concurrency, lifecycle, storage, read API), the hostile-input tests, the
fuzz test and issue 27's storage tests (trace quotas, the diagnosis queue, verifications) in
pytest subprocesses with DATABASE_URL pointing at 127.0.0.1:5432 (trust auth), one per group
of modules (each well under its time limit). Under CI=true a missing server fails; elsewhere
it skips.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .servers import POSTGRES_HOST, POSTGRES_PORT, require_postgres

ROOT = Path(__file__).resolve().parents[2]
# The modules, in groups of similar length: each group is one pytest subprocess, so that
# parallel workers (scripts/test.sh) share them out.
GROUPS = {
    "ingest": ["test_ingest.py"],
    "concurrency-and-lifecycle": ["test_ingest_concurrency.py", "test_lifecycle.py"],
    "storage-and-reads": [
        "test_storage.py",
        "test_read_api.py",
        "test_scalars.py",
        "test_handlers.py",
        "test_on_postgresql.py",
    ],
    "hostile-input": ["test_hostile_input.py"],
    "fuzz": ["test_fuzz.py"],
    # issue 27's storage: trace quotas, the diagnosis queue, verifications that need evidence
    "quotas-queue-and-verifications": [
        "../diagnostics/test_trace_quotas.py",
        "../diagnostics/test_diagnosis_queue.py",
        "../jobs/test_jobs_server.py::test_a_faster_training_result_without_loss_parity_is_not_verified",
        "../jobs/test_inference_jobs.py::test_a_faster_inference_result_without_outputs_is_not_verified",
    ],
}


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_it_passes_the_server_tests_on_postgresql(group: str) -> None:
    _passes_on_postgresql(GROUPS[group], name=f"perfweb_{group.replace('-', '_')}_{os.getpid()}")


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
            "-p",
            "no:xdist",  # one process: the parallel run shares out the groups instead
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
