"""A real perfweb stack in subprocesses for the end-to-end alert tests and the bench.

A temporary SQLite file database (WAL) or a fresh PostgreSQL database that the subprocesses
share through DATABASE_URL and this process reads directly; the ingest API under
`manage.py runserver`; a Celery worker and Celery beat on the local Redis, on a queue of
their own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.processes import free_port, stop_group, wait_for_http

ROOT = Path(__file__).resolve().parents[2]
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
REDIS_DB = int(os.environ.get("PERFWEB_TEST_REDIS_DB", "12"))


def redis_available() -> bool:
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def postgres_database_create() -> str:
    """A fresh, empty PostgreSQL database on the local server; returns its URL."""
    import psycopg

    name = f"perfweb_alerts_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def postgres_database_drop(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Stack:
    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        claim_s: float = 4.0,
        worker_concurrency: int = 1,
        database_url: str = "",
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="perfweb-alerts-"))
        self.db_path = self.dir / "perfweb.sqlite3"
        self.queue = f"alerts-test-{uuid.uuid4().hex[:10]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.worker_concurrency = worker_concurrency
        self.worker_loglevel = "WARNING"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url or f"sqlite:///{self.db_path}",
            "REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
            "PERFWEB_DATA_DIR": str(self.dir),
            "DEBUG": "true",
            "PERFWEB_ALERT_INTERVAL": str(interval_s),
            "PERFWEB_ALERT_CLAIM_SECONDS": str(claim_s),
            "PERFWEB_BASE_URL": self.url,
            "PERFWEB_ALERT_ALLOWED_NETWORKS": "127.0.0.1/32",  # the loopback receivers
            "PERFWEB_TEST_QUEUE": self.queue,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> Stack:
        self.manage("migrate", "--no-input", "-v", "0")
        self.start_process(
            "web",
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
        )
        self.start_worker()
        self.start_process(
            "beat",
            [
                sys.executable,
                "tests/alerts/celery_proc.py",
                "beat",
                "--loglevel",
                "WARNING",
                "--schedule",
                str(self.dir / "beat-schedule"),
            ],
        )
        self.wait_http(self.url + "/login/", deadline_s=60)
        self.check_alive()
        return self

    def check_alive(self) -> None:
        dead = [name for name, p in self.processes.items() if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited early:\n{self.logs()}")

    def start_worker(self) -> None:
        self.start_process(
            "worker",
            [
                sys.executable,
                "tests/alerts/celery_proc.py",
                "worker",
                "--loglevel",
                self.worker_loglevel,
                "--pool",
                "prefork",
                "--concurrency",
                str(self.worker_concurrency),
                "--without-gossip",
                "--without-mingle",
                "--hostname",
                f"alerts-{uuid.uuid4().hex[:6]}@%h",
            ],
        )

    def start_process(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (lives with the process)
        self.processes[name] = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, name: str) -> None:
        """SIGKILL the process group: no warm shutdown, no ack, no cleanup."""
        process = self.processes.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self) -> None:
        for name in list(self.processes):
            stop_group(self.processes.pop(name), grace_s=10)
        self._drop_queue()

    def cleanup(self) -> None:
        """Removes the temporary directory (database, logs, beat schedule)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.dir.glob("*.log")
        )

    # helpers ---------------------------------------------------------------------------
    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def shell(self, code: str) -> str:
        return self.manage("shell", "-c", code)

    def bootstrap(self, project: str) -> str:
        out = self.manage(
            "bootstrap", "--user", "alerts", "--password", "alerts-pass", "--project", project
        )
        return next(line[6:] for line in out.splitlines() if line.startswith("token="))

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        url = self.env["DATABASE_URL"]
        if url.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(url, autocommit=True) as db:
                return [tuple(row) for row in db.execute(sql).fetchall()]  # type: ignore[arg-type]
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql).fetchall()

    def send_task(self, name: str, *args: Any) -> None:
        from celery import Celery

        client = Celery(broker=self.env["REDIS_URL"])
        client.send_task(name, args=list(args), queue=self.queue)
        client.close()

    def post(self, path: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def wait_http(self, url: str, deadline_s: float) -> None:
        wait_for_http(url, deadline_s, context=self.logs())

    def _drop_queue(self) -> None:
        try:
            with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=2) as sock:
                command = f"*2\r\n$6\r\nSELECT\r\n${len(str(REDIS_DB))}\r\n{REDIS_DB}\r\n"
                command += f"*2\r\n$3\r\nDEL\r\n${len(self.queue)}\r\n{self.queue}\r\n"
                sock.sendall(command.encode())
                sock.recv(64)
        except OSError:
            pass
