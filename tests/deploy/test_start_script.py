"""The README's first command, `bash scripts/start.sh`, run twice the way a user runs it.

A Ctrl-C in a terminal sends SIGINT to the terminal's foreground process group: the script and
whatever shares its group; closing the terminal sends SIGHUP to it. The test does the same
(`killpg` on the script's own session), once each, and checks what the user sees afterwards:
every process the script started has exited, and the demo run the script launched ended
`finished` with exit code 0, because the server was still taking its last batches and its
finish when the demo stopped. The second start reuses the database and the token and streams
a second demo run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import IO

import psutil

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO = "demo-cpu-training"


def _runs(server: str, token: str) -> list[dict[str, object]]:
    request = urllib.request.Request(
        f"{server}/api/v1/runs", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return list(json.load(response)["runs"])


def _wait_for_streaming_demo(
    server: str, token_file: Path, *, runs_before: int, log: Path, deadline_s: float
) -> tuple[str, dict[str, object]]:
    """The token, and the newest demo run once it has recorded steps."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            token = token_file.read_text().strip()
            demos = [run for run in _runs(server, token) if run["name"] == DEMO]
        except OSError:
            demos = []
        if len(demos) > runs_before:
            newest = max(demos, key=lambda run: float(str(run["started_at"])))
            if int(str(newest["steps"])) > 0:
                return token, newest
        time.sleep(0.5)
    raise TimeoutError(f"no demo run streamed within {deadline_s:.0f} s\n{log.read_text()}")


def _wait_for_exit(start: subprocess.Popen[bytes], log: Path) -> None:
    try:
        start.wait(timeout=90)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"start.sh did not stop within 90 s\n{log.read_text()}") from None


def _alive(processes: list[psutil.Process], *, grace_s: float = 5.0) -> list[str]:
    """The command lines of `processes` still running `grace_s` after the script exited."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(process.cmdline()))
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _command_lines(processes: list[psutil.Process]) -> list[tuple[psutil.Process, list[str]]]:
    """Those `processes` still there, each with its command line (a short-lived child, e.g.
    a pool's helper or a shell, may be gone between the listing and the reading)."""
    lines = []
    for process in processes:
        try:
            lines.append((process, process.cmdline()))
        except psutil.NoSuchProcess:
            continue
    return lines


def _kill_all(start: subprocess.Popen[bytes], started: list[psutil.Process]) -> None:
    """Clean up after a failed test: nothing the script started outlives it."""
    for process in [*started, psutil.Process(start.pid)] if start.poll() is None else started:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue


def _start(env: dict[str, str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["bash", "scripts/start.sh"],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the script leads its own group, as a terminal's job does
    )


def _env(data: Path, port: int) -> dict[str, str]:
    """The user's environment, with the embedded defaults (SQLite, no Redis) in `data`, and
    the agents' spill directory (what they could not send) in data/spill."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "PERF_AGENT_SERVER", "PERF_AGENT_TOKEN")
    }
    env.update(
        PERFWEB_DATA_DIR=str(data),
        PERFWEB_PORT=str(port),
        PERF_AGENT_SPILL_DIR=str(data / "spill"),
    )
    return env


def _spilled(data: Path) -> list[Path]:
    spill = data / "spill"
    return [path for path in spill.rglob("*") if path.is_file()] if spill.exists() else []


def test_start_twice_and_ctrl_c_or_hangup_ends_the_demo_run_and_every_process(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    env = _env(data, port)
    tokens: list[str] = []
    demo_ids: list[object] = []
    for attempt, signum in enumerate((signal.SIGINT, signal.SIGHUP)):  # Ctrl-C, terminal closed
        log = tmp_path / f"start-{attempt}.log"
        started: list[psutil.Process] = []
        with log.open("wb") as out:
            start = _start(env, out)
        try:
            token, demo = _wait_for_streaming_demo(
                server, data / "demo-token", runs_before=attempt, log=log, deadline_s=180
            )
            tokens.append(token)
            demo_ids.append(demo["id"])
            started = psutil.Process(start.pid).children(recursive=True)
            commands = " ".join(" ".join(line) for _, line in _command_lines(started))
            for program in (
                "honcho",
                "gunicorn",
                "celery -A perfweb worker",
                "celery -A perfweb beat",
                "perf-agent attach",
                "demo_train.py",
            ):
                assert program in commands
            os.killpg(start.pid, signum)  # as the terminal does
            _wait_for_exit(start, log)
        finally:
            _kill_all(start, started)
        output = log.read_text()
        assert start.returncode == 0, output
        assert _alive(started) == [], output
        assert _spilled(data) == [], output  # every batch and the finish were stored
        assert "done:" in output and "(stopped by SIGTERM)" in output, output
        # a clean stop: no pool process killed mid-task, nothing left for honcho to SIGKILL
        assert "exited with 'signal 15" not in output and "SIGKILL" not in output, output

    assert tokens[0] == tokens[1]  # the second start reused the token, and the database
    with sqlite3.connect(data / "perfweb.sqlite3") as db:
        rows = db.execute(
            "SELECT run_id, status, exit_code, ended_at IS NOT NULL FROM runs_run"
            " WHERE name = ? ORDER BY started_at",
            (DEMO,),
        ).fetchall()
    assert [run_id for run_id, *_ in rows] == demo_ids
    assert [tuple(row[1:]) for row in rows] == [("finished", 0, 1), ("finished", 0, 1)]


def test_a_taken_port_is_named_and_nothing_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            ["bash", "scripts/start.sh"],
            cwd=ROOT,
            env=_env(tmp_path / "data", port),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert f"perfweb: port {port} is taken" in result.stderr
    assert "perfweb is starting" not in result.stdout
    assert not (tmp_path / "data" / "perfweb.sqlite3").exists()


def test_when_the_web_dies_the_script_stops_the_rest_and_fails(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    log = tmp_path / "start.log"
    started: list[psutil.Process] = []
    with log.open("wb") as out:
        start = _start(_env(data, port), out)
    try:
        _wait_for_streaming_demo(
            f"http://127.0.0.1:{port}",
            data / "demo-token",
            runs_before=0,
            log=log,
            deadline_s=180,
        )
        started = psutil.Process(start.pid).children(recursive=True)
        gunicorn = [".venv/bin/gunicorn"]
        gunicorns = [p for p, line in _command_lines(started) if line[1:2] == gunicorn]
        master = next(p for p in gunicorns if p.parent() not in gunicorns)  # not a worker
        master.kill()
        _wait_for_exit(start, log)
    finally:
        _kill_all(start, started)
    output = log.read_text()
    assert start.returncode == 1, output
    assert "perfweb: web, worker or beat ended (see above): stopping the demo run" in output
    assert _alive(started) == [], output
    assert _spilled(data), output  # the demo's last batches and its finish, kept for upload
