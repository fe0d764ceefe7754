"""`perf-agent doctor`: what the agent would see here, in a few plain lines."""

from __future__ import annotations

import importlib.util
import platform
from collections.abc import Callable

from agent import transport
from agent.log import silence
from agent.nvml import NvmlCollector, Query

RUNS_PATH = "/api/v1/runs?limit=1"


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


def server_lines(
    server: str | None, token: str | None, get: Callable[..., transport.Reply] = transport.get
) -> list[str]:
    """Server reachability and token validity."""
    if not server:
        return ["server: none configured (--server or PERF_AGENT_SERVER)"]
    reply = get(server, RUNS_PATH, token, 5.0)
    if reply.status == 0:
        return [f"server: {server} unreachable ({reply.error})"]
    if reply.status in (401, 403):
        return [f"server: {server} reachable; token rejected ({reply.status})"]
    if reply.ok:
        return [f"server: {server} reachable; token valid"]
    return [f"server: {server} answered {reply.status} ({reply.error})"]


def doctor(server: str | None, token: str | None, query: Query | None = None) -> list[str]:
    """Every line of the report."""
    psutil = importlib.util.find_spec("psutil") is not None
    lines = [f"python: {platform.python_version()} on {platform.platform(terse=True)}"]
    lines += nvml_lines(query)
    lines.append(torch_line())
    lines.append("psutil: " + ("installed" if psutil else "missing (process stats from /proc)"))
    lines += server_lines(server, token)
    return lines
