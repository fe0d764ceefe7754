"""A real perfweb stack in subprocesses for the optimisation-job end-to-end tests.

A temporary SQLite file that every process shares through DATABASE_URL (this process reads
it with sqlite3); the server under `manage.py runserver`; a Celery worker on the local Redis,
on a queue of its own (PERFWEB_CELERY_QUEUE) so it never trades messages with anybody else's
worker, even another checkout's test run on the same Redis; `perf-agent attach` runs and a
`perf-agent runner`.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.processes import free_port, stop_group, wait_for_http

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REDIS_DB = int(os.environ.get("PERFWEB_JOBS_TEST_REDIS_DB", "13"))
USER, PASSWORD = "jobs", "jobs-test-pass"


class Stack:
    def __init__(self, *, claim_ttl_s: float = 60.0) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="perfweb-jobs-"))
        self.db_path = self.dir / "perfweb.sqlite3"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ledger = self.dir / "recorded-commands.json"
        self.env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{self.db_path}",
            "REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
            "PERFWEB_DATA_DIR": str(self.dir),
            "PERFWEB_CELERY_QUEUE": f"perfweb-test-{uuid.uuid4().hex[:12]}",
            "DEBUG": "true",
            "PERFWEB_JOB_CLAIM_TTL": str(claim_ttl_s),
            "PERF_AGENT_LEDGER": str(self.ledger),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.token = ""
        self.browser = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> Stack:
        self._flush_broker()
        self.manage("migrate", "--no-input", "-v", "0")
        out = self.manage("bootstrap", "--user", USER, "--password", PASSWORD, "--project", "jobs")
        self.token = next(line[6:] for line in out.splitlines() if line.startswith("token="))
        self.spawn(
            "web",
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
        )
        worker = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "perfweb",
            "worker",
            "--loglevel",
            "WARNING",
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--hostname",
            f"jobs-{self.port}@%h",
        ]
        self.spawn("worker", worker)
        self.wait_http(self.url + "/login/", deadline_s=60)
        self.login()
        return self

    def spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (lives with the process)
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def stop(self) -> None:
        for name in list(self.processes):
            stop_group(self.processes.pop(name), grace_s=15)
        self._flush_broker()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in self.dir.glob("*.log")
        )

    # the product, as its users reach it -------------------------------------------------
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

    def attach(self, *command: str) -> str:
        """`perf-agent attach --server --token -- CMD` to the end; returns the run id."""
        done = subprocess.run(
            [
                str(BIN / "perf-agent"),
                "attach",
                "--server",
                self.url,
                "--token",
                self.token,
                "--",
                *command,
            ],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return self.query("SELECT run_id FROM runs_run ORDER BY id DESC LIMIT 1")[0][0]

    def start_runner(self, name: str = "runner") -> subprocess.Popen[bytes]:
        return self.spawn(
            name,
            [
                str(BIN / "perf-agent"),
                "runner",
                "--server",
                self.url,
                "--token",
                self.token,
                "--poll",
                "0.5",
            ],
        )

    def login(self) -> None:
        page = self.browser.open(self.url + "/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        self.form("/login/", {"username": USER, "password": PASSWORD}, csrf=csrf)

    def form(self, path: str, fields: dict[str, str], *, csrf: str | None = None) -> str:
        """POST a dashboard form as the logged-in user; returns the final URL."""
        if csrf is None:
            page = self.browser.open(self.url + "/login/").read().decode()
            match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
            csrf = match.group(1) if match else self._cookie("csrftoken")
        data = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": csrf}).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers={"Referer": self.url + path}
        )
        with self.browser.open(request) as reply:
            return reply.geturl()

    def _cookie(self, name: str) -> str:
        for handler in self.browser.handlers:
            jar = getattr(handler, "cookiejar", None)
            for cookie in jar or []:
                if cookie.name == name:
                    return str(cookie.value)
        return ""

    def try_fix(
        self,
        run_id: str,
        *,
        finding_id: str = "",
        knob: str,
        rounds: int = 3,
        steps: int = 15,
        max_rounds: int = 20,
        **extra: str,
    ) -> int:
        """The "Try this fix" button (or the knob form, with `extra` fields such as
        agreement_top1) on the run's jobs page: the job id."""
        fields = {
            "knob": knob,
            "rounds": str(rounds),
            "steps": str(steps),
            "max_rounds": str(max_rounds),
            **extra,
        }
        if finding_id:
            fields["finding_id"] = finding_id
        landed = self.form(f"/runs/{run_id}/jobs/", fields)
        match = re.search(r"/jobs/(\d+)/$", landed)
        assert match, f"no job page after starting a job: {landed}\n{self.logs()}"
        return int(match.group(1))

    def job_state(self, job_id: int) -> dict[str, Any]:
        with self.browser.open(f"{self.url}/jobs/{job_id}.json") as reply:
            return json.loads(reply.read())

    def wait_job(self, job_id: int, *, deadline_s: float = 800) -> dict[str, Any]:
        """The job's state once it has ended (`deadline_s` only guards against a hang)."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state["terminal"]:
                return state
            time.sleep(1)
        raise TimeoutError(f"job {job_id} did not finish\n{self.logs()}")

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql, params).fetchall()

    def wait_row(self, sql: str, *params: Any, deadline_s: float = 60) -> tuple[Any, ...]:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            rows = self.query(sql, *params)
            if rows:
                return rows[0]
            time.sleep(0.5)
        raise TimeoutError(f"no row for {sql}\n{self.logs()}")

    def send_task(self, name: str, *args: Any) -> None:
        from celery import Celery

        client = Celery(broker=self.env["REDIS_URL"])
        client.send_task(name, args=list(args), queue=self.env["PERFWEB_CELERY_QUEUE"])
        client.close()

    def wait_http(self, url: str, deadline_s: float) -> None:
        wait_for_http(url, deadline_s, context=self.logs())

    def _flush_broker(self) -> None:
        """Drops this stack's queue (a shared database is never flushed: other runs use it)."""
        db, queue = str(REDIS_DB), self.env["PERFWEB_CELERY_QUEUE"]
        try:
            with socket.create_connection(("127.0.0.1", 6379), timeout=2) as sock:
                sock.sendall(
                    f"*2\r\n$6\r\nSELECT\r\n${len(db)}\r\n{db}\r\n"
                    f"*2\r\n$3\r\nDEL\r\n${len(queue)}\r\n{queue}\r\n".encode()
                )
                sock.recv(64)
        except OSError:
            pass
