"""A real perfweb server for the agent's end-to-end tests, and a proxy that answers late.

The server: a fresh PostgreSQL database on the local server (trust auth), migrated and
bootstrapped, under `manage.py runserver` (no worker: ingest only enqueues, on the
filesystem broker in the server's own data folder). The proxy forwards each request at once
and holds the answer until `delay_s` after the request arrived, as a server that takes that
long to reply would.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.processes import free_port, stop_group, wait_for_http
from tests.server.servers import POSTGRES_HOST, POSTGRES_PORT, require_postgres

ROOT = Path(__file__).resolve().parents[2]
ADMIN_URL = f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/postgres"


class RealServer:
    """`RealServer().start()`, then `.url`, `.token`, `.query(sql)`, and `.stop()`."""

    def __init__(self) -> None:
        require_postgres()  # under CI=true a missing server fails the test, never skips
        self.dir = Path(tempfile.mkdtemp(prefix="perfweb-agent-"))
        self.db_name = f"perfweb_agent_{uuid.uuid4().hex[:10]}"
        self.database_url = f"postgresql://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{self.db_name}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
        env.pop("REDIS_URL", None)
        self.env = {
            **env,
            "DATABASE_URL": self.database_url,
            "PERFWEB_DATA_DIR": str(self.dir),
            "DEBUG": "true",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        self.web: subprocess.Popen[bytes] | None = None

    def start(self) -> RealServer:
        import psycopg

        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.db_name}"')
        self.manage("migrate", "--no-input", "-v", "0")
        out = self.manage(
            "bootstrap", "--user", "agent", "--password", "agent-test-pass", "--project", "agent"
        )
        self.token = next(line[6:] for line in out.splitlines() if line.startswith("token="))
        log = open(self.dir / "web.log", "ab")  # noqa: SIM115 (lives with the process)
        self.web = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for_http(self.url + "/login/", 90, context=self.logs())
        return self

    def stop(self) -> None:
        import psycopg

        if self.web is not None:
            stop_group(self.web, grace_s=10)
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
        shutil.rmtree(self.dir, ignore_errors=True)

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def logs(self) -> str:
        path = self.dir / "web.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as db:
            return [tuple(row) for row in db.execute(sql, params).fetchall()]  # type: ignore[arg-type]

    def run_row(self, run_id: str) -> tuple[Any, ...] | None:
        """(status, name, tags, facts) of a run, or None while it is not stored."""
        rows = self.query(
            "SELECT status, name, tags, facts FROM runs_run WHERE run_id = %s", run_id
        )
        return rows[0] if rows else None

    def stored_samples(self, run_id: str) -> int:
        """Metric samples stored for a run (steps not included)."""
        rows = self.query(
            "SELECT COALESCE(SUM(c.count), 0) FROM series_chunk c"
            " JOIN series_series s ON s.id = c.series_id JOIN runs_run r ON r.id = s.run_id"
            " WHERE r.run_id = %s AND s.device NOT LIKE 'rank:%%'",
            run_id,
        )
        return int(rows[0][0])

    def produced(self, run_id: str) -> list[dict[str, Any]]:
        """Each worker's `finish.produced`."""
        rows = self.query(
            "SELECT p.produced FROM runs_runprocess p JOIN runs_run r ON r.id = p.run_id"
            " WHERE r.run_id = %s AND p.role = 'worker'",
            run_id,
        )
        return [row[0] for row in rows]

    def series(self, run_id: str, name: str) -> dict[str, Any]:
        """The read API's answer for one series of a run, every raw point."""
        request = urllib.request.Request(
            f"{self.url}/api/v1/runs/{run_id}/series?name={name}&points=10000",
            headers={"Authorization": f"Bearer {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())


class DelayProxy:
    """Forwards to `upstream` at once; answers `delay_s` after each request arrived. While
    `failing`, it answers 503 at once instead (an outage behind a load balancer)."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.delay_s = delay_s
        self.failing = False
        self.requests = 0
        self.late_answers = 0  # answers the client no longer waited for
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                arrived = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if proxy.failing:
                    data = b'{"error": "down"}'
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                status, headers, data = proxy.forward(self.command, self.path, self.headers, body)
                time.sleep(max(0.0, arrived + proxy.delay_s - time.monotonic()))
                try:
                    self.send_response(status)
                    for key, value in headers:
                        if key.lower() not in ("transfer-encoding", "connection", "date", "server"):
                            self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    proxy.late_answers += 1

            do_GET = do_POST  # noqa: N815

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                proxy.late_answers += 1

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def forward(
        self, method: str, path: str, headers: Any, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        self.requests += 1
        connection = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            keep = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            connection.request(method, path, body=body or None, headers=keep)
            reply = connection.getresponse()
            return reply.status, reply.getheaders(), reply.read()
        finally:
            connection.close()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
