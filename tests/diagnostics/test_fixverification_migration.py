"""FixVerification moved from the jobs app to diagnostics (issue 28) by state-only migrations:
a verification stored before the move is the same row after it, in the same table, and
migrating back gives it to the jobs app again. Runs on the suite's database (SQLite, or
PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from perfweb.diagnostics.gains import verified_gains_for_run
from perfweb.diagnostics.models import FixVerification
from perfweb.runs.models import Run

BEFORE = [
    ("diagnostics", "0002_rundiagnosis_queued_at"),
    ("jobs", "0004_arm_metrics_agreement_tolerance"),
]
AFTER = [
    ("diagnostics", "0003_fixverification_from_jobs"),
    ("jobs", "0005_fixverification_to_diagnostics"),
]


@pytest.fixture
def before_the_move(transactional_db: None) -> Iterator[Any]:
    """The apps' state before the move (the old models), migrated forward again afterwards."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        yield executor.loader.project_state(BEFORE).apps
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def _stored_verification(old: Any) -> int:
    project = old.get_model("projects", "Project").objects.create(name="moved")
    now = timezone.now()
    run = old.get_model("runs", "Run").objects.create(
        project=project,
        run_id="run-moved-1",
        host="h",
        command=["python"],
        started_at=now,
        last_seen_at=now,
    )
    job = old.get_model("jobs", "Job").objects.create(
        project=project, run=run, host="h", knobs={"num_workers": 4}
    )
    old.get_model("jobs", "FixVerification").objects.create(
        run=run,
        finding_id="dataloader.num_workers",
        job=job,
        status="verified",
        measured_gain=0.5,
        speedup=2.0,
        ci_low=1.9,
        ci_high=2.1,
        reason="measured faster",
    )
    return int(job.id)


def test_a_verification_stored_before_the_move_is_diagnostics_after_it(
    before_the_move: Any,
) -> None:
    job_id = _stored_verification(before_the_move)
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)

    moved = FixVerification.objects.get()
    assert FixVerification._meta.db_table == "jobs_fixverification"
    assert (moved.finding_id, moved.status, moved.job_id, moved.reason) == (
        "dataloader.num_workers",
        "verified",
        job_id,
        "measured faster",
    )
    assert verified_gains_for_run(run=Run.objects.get()) == {"dataloader.num_workers": 0.5}


def test_migrating_back_gives_the_rows_to_the_jobs_app_again(before_the_move: Any) -> None:
    _stored_verification(before_the_move)
    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    assert old.get_model("jobs", "FixVerification").objects.get().measured_gain == 0.5
