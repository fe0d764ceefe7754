"""`perf-agent doctor`: what the agent would see here, in a few plain lines.

Its exit code gates a job script: 1 when a server is configured but unreachable, rejects the
token or answers an error; 0 otherwise (no GPU or no psutil is a degraded agent, not a broken
one).
"""

from __future__ import annotations

import importlib.util
import platform
from collections.abc import Callable
from dataclasses import dataclass, field

from perfweb_agent.collectors.nvml import NvmlCollector, Query
from perfweb_agent.core.logger import silence
from perfweb_agent.delivery import transport
from perfweb_contract import api

RUNS_PATH = f"{api.RUNS_PATH}?limit=1"


def nvml_lines(query: Query | None = None) -> list[str]:
    """NVML and its GPUs."""
    silence("no-nvml", "no-gpu")  # doctor says it in its own words
    nvml = NvmlCollector(query)
    if not nvml.is_available():
        return [f"NVML: not available ({nvml.error}); GPU metrics off, the rest works"]
    lines = [f"NVML: driver {nvml.driver_version}, {len(nvml.devices())} GPU(s)"]
    for device in nvml.devices():
        memory = device.get("memory_total")
        gib = f", {memory / 2**30:.0f} GiB" if memory else ""
        mig = ", MIG" if device.get("mig") else ""
        lines.append(f"  {device['key']}: {device.get('name')}{gib}{mig}")
    return lines


def torch_line() -> str:
    """The torch this Python would give the script (doctor may import it; a guest may not)."""
    if importlib.util.find_spec("torch") is None:
        return "torch: not installed in this Python"
    import torch

    cuda = torch.version.cuda or "CPU build"
    return f"torch: {torch.__version__} (CUDA {cuda}, cuda available: {torch.cuda.is_available()})"


@dataclass
class Report:
    """What doctor prints, and whether the server part failed (the exit code)."""

    lines: list[str] = field(default_factory=list)
    server_failed: bool = False


def server_check(
    server: str | None, token: str | None, get: Callable[..., transport.Reply] = transport.get
) -> tuple[str, bool]:
    """Server reachability and token validity: the line, and whether it is a failure."""
    if not server:
        return "server: none configured (--server or PERF_AGENT_SERVER)", False
    reply = get(server, RUNS_PATH, token, 5.0)
    if reply.status == 0:
        return f"server: {server} unreachable ({reply.error})", True
    if reply.status in (401, 403):
        return f"server: {server} reachable; token rejected ({reply.status})", True
    if reply.ok:
        return f"server: {server} reachable; token valid", False
    return f"server: {server} answered {reply.status} ({reply.error})", True


def server_lines(
    server: str | None, token: str | None, get: Callable[..., transport.Reply] = transport.get
) -> list[str]:
    """Server reachability and token validity, as report lines."""
    return [server_check(server, token, get)[0]]


def doctor(server: str | None, token: str | None, query: Query | None = None) -> Report:
    """Every line of the report, and whether the server check failed."""
    psutil = importlib.util.find_spec("psutil") is not None
    report = Report([f"python: {platform.python_version()} on {platform.platform(terse=True)}"])
    report.lines += nvml_lines(query)
    report.lines.append(torch_line())
    report.lines.append(
        "psutil: " + ("installed" if psutil else "missing (process stats from /proc)")
    )
    line, report.server_failed = server_check(server, token)
    report.lines.append(line)
    return report
