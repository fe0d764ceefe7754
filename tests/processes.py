"""Helpers for tests that run the product as separate processes (server, worker, agent)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_http(url: str, deadline_s: float, *, context: str = "") -> None:
    """Return once `url` answers; TimeoutError (with `context`, e.g. logs) past the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {deadline_s:.0f} s\n{context}".rstrip())


def stop_group(
    process: subprocess.Popen[bytes], *, first: signal.Signals = signal.SIGTERM, grace_s: float
) -> None:
    """Stop the process group `process` leads: `first`, then SIGKILL after `grace_s`."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, first)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
