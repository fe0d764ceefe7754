"""A worker killed mid-diagnosis: its claim runs out within PERFWEB_DIAGNOSE_CLAIM_TTL and
the diagnosis completes on a new worker within 2 minutes of its start (real Celery worker
and beat over the local Redis, defaults for the TTL and the sweep interval). And the claim
of a live diagnosis is renewed, so it never runs out under a working worker."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from perfweb.diagnostics.claims import claim_kept
from perfweb.diagnostics.models import RunDiagnosis
from perfweb.runs.models import Run
from tests.diagnostics.test_celery_worker import STORE_RUN
from tests.server.servers import REDIS_HOST, REDIS_PORT, require_redis
from tests.server.test_celery import ROOT, Server

REDIS_DB = 11  # shared with test_celery_worker: each test has its own queue
RECOVERY_BOUND_S = 120.0
PROCESS = [sys.executable, "tests/alerts/celery_proc.py"]  # a queue of its own
WORKER = ["worker", "--pool", "solo", "--without-mingle", "--without-gossip", "-l", "info"]


def _start(server: Server, *args: str) -> subprocess.Popen[bytes]:
    with server.log.open("ab") as log:
        process = subprocess.Popen(
            [*PROCESS, *args],
            cwd=ROOT,
            env=server.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server.processes.append(process)
    return process


def _diagnosis(database: Path, run_pk: int) -> tuple[Any, Any]:
    with sqlite3.connect(database, timeout=30) as connection:
        rows = connection.execute(
            "select diagnosed_at, claimed_until from diagnostics_rundiagnosis where run_id = ?",
            (run_pk,),
        ).fetchall()
    return rows[0] if rows else (None, None)


def _wait(condition: Any, *, seconds: float, server: Server, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if condition():
            return time.monotonic() - started
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {seconds:.0f} s:\n{server.log.read_text()[-4000:]}")


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_diagnosis_whose_worker_was_killed_completes_on_a_new_worker(tmp_path: Path) -> None:
    require_redis()
    hold, started = tmp_path / "hold", tmp_path / "started"
    queue = f"perfweb-killed-worker-{os.getpid()}"
    server = Server(
        tmp_path,
        REDIS_URL=f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
        PERFWEB_TEST_QUEUE=queue,
        PYTHONPATH=str(ROOT),
        SLOW_DIAGNOSIS_HOLD=str(hold),
        SLOW_DIAGNOSIS_STARTED=str(started),
    )
    try:
        server.manage("migrate", "-v0")
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", STORE_RUN],
            cwd=ROOT,
            env=server.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        run_pk = int(done.stdout.strip().splitlines()[-1])
        hold.touch()
        doomed = _start(server, *WORKER, "-I", "tests.diagnostics.slow_diagnosis")
        subprocess.run(
            [
                *PROCESS,
                "call",
                "--args",
                f"[{run_pk}]",
                "perfweb.diagnostics.tasks.diagnose_run_task",
            ],
            cwd=ROOT,
            env=server.env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        _wait(started.exists, seconds=120, server=server, what="the diagnosis starting")
        assert _diagnosis(server.database, run_pk)[1] is not None  # claimed by the doomed one
        os.killpg(doomed.pid, signal.SIGKILL)  # mid-diagnosis; nothing of it runs after this
        doomed.wait(timeout=30)
        hold.unlink()
        _start(server, *WORKER)
        _start(server, "beat", "-l", "info", "-s", str(tmp_path / "beat-schedule"))
        took = _wait(
            lambda: _diagnosis(server.database, run_pk)[0] is not None,
            seconds=RECOVERY_BOUND_S,
            server=server,
            what="the diagnosis on the new worker",
        )
        print(f"diagnosis completed {took:.1f} s after the new worker started")
        assert started.read_text().count("\n") == 1  # the new worker did not go through the hold
    finally:
        server.stop()


@pytest.mark.django_db(transaction=True)
def test_a_live_diagnosis_keeps_renewing_its_claim(project: Any, settings: Any) -> None:
    from django.utils import timezone

    settings.PERFWEB_DIAGNOSE_CLAIM_TTL = 0.6
    now = timezone.now()
    run = Run.objects.create(
        project=project, run_id="claimed-run", started_at=now, last_seen_at=now
    )
    state = RunDiagnosis.objects.create(
        run=run, started_at=now, claimed_until=now + timedelta(seconds=0.6)
    )
    ttl = lambda: timedelta(seconds=0.6)  # noqa: E731
    with claim_kept(state=state, ttl=ttl):
        time.sleep(1.5)  # 2.5 TTLs: without renewal the claim would have run out
        claimed_until = RunDiagnosis.objects.get(id=state.id).claimed_until
        assert claimed_until is not None and claimed_until > timezone.now()
    RunDiagnosis.objects.filter(id=state.id).update(started_at=now - timedelta(seconds=5))
    with claim_kept(state=state, ttl=ttl):  # a claim taken over meanwhile is not renewed
        before = RunDiagnosis.objects.get(id=state.id).claimed_until
        time.sleep(0.5)
        assert RunDiagnosis.objects.get(id=state.id).claimed_until == before
