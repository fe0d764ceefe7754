"""Run one command of the kit: its own process group, a hard timeout, its output in a log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ran:
    """How a command ended."""

    code: int | None  # None: killed at its timeout
    wall_s: float
    log: Path

    @property
    def ok(self) -> bool:
        """Exited 0 within its time."""
        return self.code == 0

    def tail(self, lines: int = 6) -> str:
        """The last lines of its output, for the report."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        kept = [line for line in text.strip().splitlines() if line.strip()]
        return "\n".join(kept[-lines:])

    def why(self) -> str:
        """One line saying how it failed."""
        if self.code is None:
            return f"killed at its {self.wall_s:.0f} s timeout; {self.tail(2)}"
        return f"exit code {self.code}; {self.tail(3)}"


def run(
    argv: list[str], *, log: Path, timeout_s: float, env: Mapping[str, str] | None = None,
    cwd: Path | None = None, stdout: Path | None = None,
) -> Ran:  # fmt: skip
    """Run `argv` to completion or `timeout_s`, then end its whole process group.

    Its output goes to `log`; with `stdout` given, standard output goes there instead.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log, "wb") as output, open(stdout or os.devnull, "wb") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out if stdout else output,
            stderr=output,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            code: int | None = child.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _end_group(child)
    return Ran(code=code, wall_s=time.monotonic() - started, log=log)


def _end_group(child: subprocess.Popen) -> None:
    """SIGTERM the group, SIGKILL after 3 s; DataLoader workers left behind die too."""
    if child.poll() is None:
        _signal(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=3.0)
        except subprocess.TimeoutExpired:
            _signal(child.pid, signal.SIGKILL)
            child.wait()
    _signal(child.pid, signal.SIGKILL)


def _signal(pgid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signum)
