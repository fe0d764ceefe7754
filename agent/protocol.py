"""The wire protocol's shared constants (see docs/protocol.md).

Both sides import this module: the agent to build requests, the server to validate them.
It must stay dependency-free: it is loaded inside the user's training process.
"""

from __future__ import annotations

import re

API_PREFIX = "/api/v1"
START_PATH = f"{API_PREFIX}/ingest/start"
BATCH_PATH = f"{API_PREFIX}/ingest/batch"
HEARTBEAT_PATH = f"{API_PREFIX}/ingest/heartbeat"
FINISH_PATH = f"{API_PREFIX}/ingest/finish"
TRACE_PATH = f"{API_PREFIX}/ingest/trace"  # chunked profiler-trace upload (docs/protocol.md)
TRACE_CHUNK_MAX_BYTES = 4 * 1024 * 1024  # gzip bytes per chunk, before base64

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

RUN_ID_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
AGENT_ID_RE = RUN_ID_RE
DEVICE_RE = re.compile(r"^[a-z0-9:_-]{1,32}$")
METRIC_NAME_RE = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")

ROLE_LAUNCHER = "launcher"
ROLE_WORKER = "worker"
ROLES = (ROLE_LAUNCHER, ROLE_WORKER)

RUN_STATUSES = ("running", "finished", "failed", "lost")

# Environment variables through which the launcher hands settings to its children.
ENV_RUN_ID = "PERF_AGENT_RUN_ID"
ENV_SERVER = "PERF_AGENT_SERVER"
ENV_TOKEN = "PERF_AGENT_TOKEN"

# name -> unit. Unknown names are accepted and stored; these are the ones we chart.
METRICS: dict[str, str] = {
    "gpu.utilization": "%",
    "gpu.memory_utilization": "%",
    "gpu.memory_used": "bytes",
    "gpu.power": "W",
    "gpu.temperature": "°C",
    "gpu.sm_clock": "MHz",
    "gpu.pcie_tx": "bytes/s",
    "gpu.pcie_rx": "bytes/s",
    "gpu.throttle_reasons": "bitmask",
    "gpu.process_memory": "bytes",
    "gpu.sm_active": "%",
    "gpu.tensor_active": "%",
    "gpu.dram_active": "%",
    "process.cpu_percent": "%",
    "process.rss": "bytes",
    "process.threads": "count",
    "process.count": "count",  # device `workers`: how many child processes were summed
    "torch.cuda_allocated": "bytes",
    "torch.cuda_reserved": "bytes",
    "torch.cuda_peak": "bytes",
    "step.duration": "s",
    "step.data_wait": "s",
}

STEP_DURATION = "step.duration"
STEP_DATA_WAIT = "step.data_wait"


def rank_device(rank: int | None) -> str:
    """The device key under which a rank's step series are stored."""
    return f"rank:{rank or 0}"
