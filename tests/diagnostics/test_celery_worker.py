"""diagnose_run_task through a real Celery worker over the local Redis (CI=true: Redis must
be there; elsewhere the test skips without it). The worker is the server's own process on a
temporary SQLite file; an input-bound run is stored through the ingest parsers first."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.servers import REDIS_HOST, REDIS_PORT, require_redis
from tests.server.test_celery import ROOT, WORKER, Server

REDIS_DB = 11  # alerts use 12, jobs 13, the server tests 14
STORE_RUN = """
from perfweb.projects.services import project_create
from perfweb.ingest.batches import batch_store
from perfweb.runs.schemas import parse_batch, parse_start
from perfweb.runs.services import run_start
project = project_create(name="p")
ids = {"run_id": "diag-worker-run", "agent_id": "diag-worker-agent"}
run = run_start(project=project, request=parse_start({**ids, "role": "launcher",
    "started_at": 1764496800.0, "facts": {"dataloader.0.num_workers": 0, "host.cpu_count": 8}}))
ends = [1764496800.0 + 0.1 * (i + 1) for i in range(60)]
batch_store(project=project, request=parse_batch({**ids, "seq": 0, "sent_at": ends[-1],
    "steps": {"rank": 0, "index": list(range(60)), "t": ends, "duration": [0.1] * 60,
              "data_wait": [0.06] * 60}}))
print(run.id)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    server = Server(tmp_path, REDIS_URL=f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}")
    yield server
    server.stop()


def top_finding(database: Path, run_pk: int) -> str | None:
    with sqlite3.connect(database, timeout=30) as connection:
        rows = connection.execute(
            "select rule_id from diagnostics_finding where run_id = ? order by rank", (run_pk,)
        ).fetchall()
    return rows[0][0] if rows else None


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_it_diagnoses_a_run_through_a_real_worker_over_redis(server: Server) -> None:
    require_redis()
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
    queue = f"perfweb-diagnostics-test-{os.getpid()}"  # Redis is shared: nobody else listens
    server.celery(*WORKER, "-Q", queue)
    for _ in range(2):  # twice: the second run finds the same findings and changes nothing
        subprocess.run(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "perfweb",
                "call",
                "--queue",
                queue,
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
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and top_finding(server.database, run_pk) is None:
        for process in server.processes:
            assert process.poll() is None, server.log.read_text()[-3000:]
        time.sleep(0.5)
    log = server.log.read_text()[-3000:]
    assert top_finding(server.database, run_pk) == "dataloader.num_workers", log
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.log.read_text().count("succeeded") < 2:
        time.sleep(0.5)
    assert server.log.read_text().count("succeeded") == 2, server.log.read_text()[-3000:]
    with sqlite3.connect(server.database, timeout=30) as connection:
        [(count, distinct)] = connection.execute(
            "select count(*), count(distinct rule_id) from diagnostics_finding"
        ).fetchall()
    assert count == distinct >= 1
