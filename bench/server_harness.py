"""A real perfweb server for the benchmarks: a fresh database (SQLite file or a PostgreSQL
database on 127.0.0.1), migrated and bootstrapped, served by gunicorn on loopback.

Used by ingest.py, timeline.py and concurrency.py; everything it starts or creates is stopped
or dropped at the end.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
POSTGRES = "postgresql://postgres@127.0.0.1:5432"


@dataclass
class Database:
    kind: str  # "sqlite" | "postgresql"
    url: str
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    token: str = ""
    server_pid: int = 0  # gunicorn's master while server() runs

    def server_cpu_s(self) -> float:
        """CPU seconds used so far by gunicorn (master and workers)."""
        pids = [self.server_pid, *children(self.server_pid)]
        return sum(process_cpu_s(pid) for pid in pids)

    def database_cpu_s(self) -> float:
        """CPU seconds used so far by the PostgreSQL backends serving this database (0 for
        SQLite, which runs inside the server's and loader's own processes)."""
        if self.kind != "postgresql":
            return 0.0
        import psycopg

        with psycopg.connect(self.url) as connection:
            rows = connection.execute(
                "select pid from pg_stat_activity where datname = current_database()"
            ).fetchall()
        return sum(process_cpu_s(pid) for (pid,) in rows)

    def storage_bytes(self, tables: tuple[str, ...]) -> int:
        """Bytes on disk of these tables with their indexes (and TOAST on PostgreSQL)."""
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.url) as connection:
                sizes = [
                    connection.execute("select pg_total_relation_size(%s)", (table,)).fetchone()
                    for table in tables
                ]
                return sum(int(size[0]) for size in sizes if size is not None)
        path = self.url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as connection:
            connection.execute("pragma wal_checkpoint(truncate)")
            names = [
                row[0]
                for row in connection.execute(
                    "select name from sqlite_master where tbl_name in "
                    f"({','.join('?' * len(tables))})",
                    tables,
                )
            ]
            return connection.execute(
                "select coalesce(sum(pgsize), 0) from dbstat where name in "
                f"({','.join('?' * len(names))})",
                names,
            ).fetchone()[0]

    def vacuum_analyze(self, tables: tuple[str, ...]) -> None:
        if self.kind == "postgresql":
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as connection:
                for table in tables:
                    connection.execute(f"vacuum analyze {table}")


@contextlib.contextmanager
def database(kind: str) -> Iterator[Database]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"perfweb-bench-{kind}-"))
    name = f"perfweb_bench_{os.getpid()}"
    if kind == "postgresql":
        import psycopg

        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as connection:
            connection.execute(f"create database {name}")
        url = f"{POSTGRES}/{name}"
    else:
        url = f"sqlite:///{data_dir / 'perfweb.sqlite3'}"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DEBUG")},
        "DATABASE_URL": url,
        "PERFWEB_DATA_DIR": str(data_dir),
        "SECRET_KEY": "bench",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SETTINGS_MODULE": "perfweb.settings",
    }
    db = Database(kind=kind, url=url, data_dir=data_dir, env=env)
    try:
        manage(db, "migrate", "-v0")
        out = manage(
            db, "bootstrap", "--user", "bench", "--password", "bench", "--project", "bench"
        )
        db.token = out.strip().removeprefix("token=")
        yield db
    finally:
        if kind == "postgresql":
            import psycopg

            with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as connection:
                connection.execute(f"drop database if exists {name} with (force)")
        shutil.rmtree(data_dir, ignore_errors=True)


def manage(db: Database, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=db.env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result.stdout


def setup_django(db: Database) -> None:
    """Django in this process, on the benchmark's database (for direct reads and loads)."""
    os.environ.update(db.env)
    import django

    django.setup()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def server(db: Database, *, workers: int, threads: int = 1) -> Iterator[tuple[str, int]]:
    """gunicorn on 127.0.0.1 with `workers` workers, sync ones or, with `threads` > 1,
    threaded ones as the Procfile runs; yields (host, port)."""
    port = free_port()
    log = (db.data_dir / "gunicorn.log").open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "perfweb.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--threads",
            str(threads),
            "--timeout",
            "120",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=db.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    db.server_pid = process.pid
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = request("127.0.0.1", port, "GET", "/api/v1/runs", token=db.token)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError((db.data_dir / "gunicorn.log").read_text()[-3000:])
            time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def process_cpu_s(pid: int) -> float:
    """user + system CPU seconds of a live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request(
    host: str,
    port: int,
    method: str,
    path: str,
    *,
    token: str,
    body: bytes | None = None,
    gzipped: bool = False,
    timeout: float = 120,
) -> tuple[int, Any]:
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        connection.close()


def gz(body: dict[str, Any]) -> bytes:
    import orjson

    return gzip.compress(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), 1)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def get_timed(host: str, port: int, path: str, *, token: str) -> tuple[int, bytes, float, float]:
    """GET on a fresh connection: (status, body, server ms from Server-Timing, wall ms)."""
    began = time.perf_counter()
    connection = http.client.HTTPConnection(host, port, timeout=300)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read()
        wall = 1000 * (time.perf_counter() - began)
        timing = response.getheader("Server-Timing") or "app;dur=nan"
        return response.status, body, float(timing.split("dur=")[1]), wall
    finally:
        connection.close()
