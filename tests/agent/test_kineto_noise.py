"""Where the `USDT: … profiler_start / profiler_stop` lines in a script's stderr come from,
as the README says: the installed torch's Kineto logs them at every start and stop of a
profiler (so at each segment of the agent's windows), and only `KINETO_LOG_LEVEL=6`, read
once when torch loads, silences them: process-wide, Kineto's own warnings with them, which is
why the agent does not set it for the user (README, "What you may see in your script's
output")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

PROFILE_ONCE = (
    "import torch\n"
    "from torch.profiler import ProfilerActivity, profile\n"
    "with profile(activities=[ProfilerActivity.CPU]):\n"
    "    torch.ones(3) + 1\n"
)


def _stderr(**environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env.update(environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", PROFILE_ONCE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_kineto_prints_a_usdt_line_at_each_profiler_start_and_stop() -> None:
    stderr = _stderr()
    assert "USDT:" in stderr and "] profiler_start" in stderr and "] profiler_stop" in stderr


def test_kineto_log_level_6_silences_them() -> None:
    assert "USDT:" not in _stderr(KINETO_LOG_LEVEL="6")
