"""Beat and worker for real: the lost-run sweep through a Celery worker, over Redis and over
the embedded filesystem broker that the one-command mode uses when REDIS_URL is unset.

Each test runs the server's own processes (migrate, worker, beat) against a temporary SQLite
file and checks the database they share.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .servers import REDIS_HOST, REDIS_PORT, require_redis

ROOT = Path(__file__).resolve().parents[2]
STALE_RUN = """
from datetime import timedelta
from django.utils import timezone
from perfweb.projects.models import Project
from perfweb.runs.models import Run
long_ago = timezone.now() - timedelta(hours=1)
project = Project.objects.create(name="p")
for run_id, seen in (("silent-run", long_ago), ("lively-run", timezone.now() + timedelta(hours=1))):
    Run.objects.create(project=project, run_id=run_id, started_at=long_ago, last_seen_at=seen)
"""


class Server:
    """The server's processes with one environment; everything started is stopped at the end."""

    def __init__(self, tmp_path: Path, **environ: str) -> None:
        self.database = tmp_path / "perfweb.sqlite3"
        self.env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        self.env.update(
            SECRET_KEY="test",
            PERFWEB_DATA_DIR=str(tmp_path),
            DATABASE_URL=f"sqlite:///{self.database}",
            **environ,
        )
        self.log = tmp_path / "celery.log"
        self.processes: list[subprocess.Popen[bytes]] = []

    def manage(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=180,
        )

    def celery(self, *args: str) -> None:
        with self.log.open("ab") as log:
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "perfweb", *args],
                    cwd=ROOT,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def status(self, run_id: str) -> str:
        with sqlite3.connect(self.database, timeout=30) as connection:
            [(status,)] = connection.execute(
                "select status from runs_run where run_id = ?", (run_id,)
            ).fetchall()
        return status

    def wait_for_status(self, run_id: str, status: str, *, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.status(run_id) == status:
                return
            for process in self.processes:
                assert process.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.5)
        pytest.fail(
            f"{run_id} is {self.status(run_id)}, not {status}:\n" + self.log.read_text()[-3000:]
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def make(**environ: str) -> Server:
        server = Server(tmp_path, **environ)
        started.append(server)
        server.manage("migrate", "-v0")
        server.manage("shell", "-c", STALE_RUN)
        return server

    yield make
    for server in started:
        server.stop()


WORKER = ("worker", "--pool", "solo", "--without-mingle", "--without-gossip", "-l", "info")


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_it_sweeps_lost_runs_through_a_real_worker_over_redis(
    server_factory: Callable[..., Server],
) -> None:
    require_redis()
    queue = f"perfweb-test-{os.getpid()}"  # Redis is shared: nobody else listens here
    server = server_factory(REDIS_URL=f"redis://{REDIS_HOST}:{REDIS_PORT}/14")
    server.celery(*WORKER, "-Q", queue)
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
            "perfweb.runs.tasks.sweep_lost_runs_task",
        ],
        cwd=ROOT,
        env=server.env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    server.wait_for_status("silent-run", "lost", seconds=90)
    assert server.status("lively-run") == "running"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_it_runs_beat_and_worker_over_the_embedded_broker(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory(PERFWEB_SWEEP_INTERVAL="1", PERFWEB_COMPACT_INTERVAL="3600")
    server.celery(*WORKER)
    server.celery("beat", "-l", "info")
    server.wait_for_status("silent-run", "lost", seconds=120)
    assert server.status("lively-run") == "running"
    assert "filesystem" in server.log.read_text()
