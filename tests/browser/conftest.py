"""A real perfweb server, a real agent-attached CPU training run, and headless Chromium.

The server is `manage.py runserver` on a free loopback port with a temporary SQLite database;
the run is `perf-agent attach ... -- python examples/demo_train.py`; the browser is Debian's
/usr/bin/chromium driven by Playwright (never a downloaded browser). Outside CI a missing
browser skips these tests; under CI=true it fails them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.processes import free_port, stop_group, wait_for_http

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD, PROJECT = "demo", "demo-password", "demo"


@dataclass
class LiveServer:
    url: str
    token: str
    data_dir: Path


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stops a process group this module started, politely first."""
    stop_group(process, first=signal.SIGINT, grace_s=15)


def manage_command(manage: list[str], args: list[str], *, env: dict[str, str]) -> str:
    done = subprocess.run(
        [*manage, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def server_env() -> Iterator[dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="perfweb-browser-") as data_dir:
        env = {
            **os.environ,
            "PERFWEB_DATA_DIR": data_dir,
            "DEBUG": "false",
            "SECRET_KEY": "browser-test-secret",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
        }
        # The server uses the test run's settings module (pytest-django exports it).
        for name in ("DATABASE_URL", "REDIS_URL"):
            env.pop(name, None)
        yield env


@pytest.fixture(scope="session")
def perfweb_server(server_env: dict[str, str]) -> Iterator[LiveServer]:
    manage = [sys.executable, str(ROOT / "manage.py")]
    manage_command(manage, ["migrate", "--noinput"], env=server_env)
    # As the README has a newcomer run it: a plain shell, no SECRET_KEY, no DEBUG.
    plain_shell = {k: v for k, v in server_env.items() if k not in ("SECRET_KEY", "DEBUG")}
    out = manage_command(
        manage,
        ["bootstrap", "--user", USER, "--password", PASSWORD, "--project", PROJECT],
        env=plain_shell,
    )
    token = re.search(r"^token=(\S+)$", out, re.M)
    assert token, f"bootstrap printed no token= line: {out!r}"
    port = free_port()
    log = open(Path(server_env["PERFWEB_DATA_DIR"]) / "server.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [*manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=server_env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/login/", deadline_s=60)
        yield LiveServer(
            url=url, token=token.group(1), data_dir=Path(server_env["PERFWEB_DATA_DIR"])
        )
    finally:
        stop(process)
        log.close()


def perf_agent() -> list[str]:
    """The installed console script, or the same entry point through this interpreter."""
    script = Path(sys.executable).with_name("perf-agent")
    return [str(script)] if script.exists() else [sys.executable, "-m", "perfweb_agent.cli.main"]


@pytest.fixture(scope="session")
def attached_run(perfweb_server: LiveServer, server_env: dict[str, str]) -> Iterator[str]:
    """A real CPU training script streaming into the server through the agent."""
    name = f"browser-demo-{os.getpid()}"
    log = open(perfweb_server.data_dir / "perfweb_agent.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [
            *perf_agent(),
            "attach",
            "--server",
            perfweb_server.url,
            "--token",
            perfweb_server.token,
            "--name",
            name,
            "--",
            sys.executable,
            str(ROOT / "examples" / "demo_train.py"),
            "--minutes",
            "3",
        ],
        env=server_env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield name
    finally:
        stop(process)
        log.close()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    path = Path(os.environ.get("PERFWEB_SCREENSHOTS") or tempfile.mkdtemp(prefix="perfweb-shots-"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {path}")
    return path


@pytest.fixture(scope="session")
def readme_shots(screenshot_dir: Path) -> Path:
    """Where the README's pictures go: `docs/screenshots/` when PERFWEB_README_SHOTS=1 (how
    they are regenerated: README.md, "Pictures"), else beside the other screenshots."""
    if os.environ.get("PERFWEB_README_SHOTS") == "1":
        path = ROOT / "docs" / "screenshots"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return screenshot_dir
