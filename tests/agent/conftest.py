"""Fixtures for the agent's tests: a loopback server and a way to run scripts attached."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.fakeserver import TOKEN, FakeServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """A healthy loopback ingest server."""
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def agent_env(tmp_path: Path) -> dict[str, str]:
    """Environment for attached runs: fast ticks, spill into tmp, no profiler."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(
        PERF_AGENT_INTERVAL="0.2",
        PERF_AGENT_FLUSH_INTERVAL="0.5",
        PERF_AGENT_SPILL_DIR=str(tmp_path / "spill"),
        PERF_AGENT_PROFILE="0",
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
    )
    return env


def write_script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    """Write a dedented script to tmp_path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def attach(
    args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `perf-agent attach ARGS` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "perfweb_agent.cli.main", "attach", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def online(server: FakeServer) -> list[str]:
    """The attach flags for the loopback server."""
    return ["--server", server.url, "--token", TOKEN]
