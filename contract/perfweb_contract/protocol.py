"""The wire protocol's shared constants (see docs/protocol.md); its paths are perfweb_contract.api.

Both sides import this module: the agent to build requests, the server to validate them.
It must stay dependency-free: it is loaded inside the user's training process.
"""

from __future__ import annotations

import base64
import binascii
import re
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TRACE_CHUNK_MAX_BYTES = 4 * 1024 * 1024  # gzip bytes per chunk, before base64

# The agent names a profiler window's trace after the steps it spans, `rank0-step20-25`: the
# trace's name on the server, `<name>.pt.trace.json.gz` offline (perfweb_contract.layout).
# Readers take the window's steps from it (which requests it perturbed, steps per window).
_WINDOW_NAME = re.compile(r"(?:^|/)rank(\d+)-step(\d+)-(\d+)(?:\.pt\.trace|$)")


@dataclass(frozen=True)
class WindowName:
    """A profiler window's rank and the agent's step counts when it opened (`first`) and
    closed (`last`); it spans `steps` = last - first steps."""

    rank: int
    first: int
    last: int

    def __str__(self) -> str:
        return f"rank{self.rank}-step{self.first}-{self.last}"

    @property
    def steps(self) -> int:
        return self.last - self.first

    @classmethod
    def parse(cls, name: str) -> WindowName | None:
        """The window a trace's name or path names; None for a trace named otherwise."""
        match = _WINDOW_NAME.search(name)
        if match is None:
            return None
        rank, first, last = (int(group) for group in match.groups())
        return cls(rank, first, last)


MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
MAX_JSON_DEPTH = 32  # nesting of objects and arrays in a request body (a batch needs 4)

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
    "gpu.energy": "J",  # the GPU's energy counter since its driver loaded (NVML)
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
    # device `process`: the main thread's share of the wall time on a CPU, and waiting on a
    # run queue for one (/proc/<pid>/schedstat): the wait is what a busy host adds
    "process.thread_cpu": "%",
    "process.run_queue_wait": "%",
    "process.threads": "count",
    "process.count": "count",  # device `workers`: how many child processes were summed
    "process.runnable": "count",  # device `workers`: of them, running or waiting for a core
    "torch.cuda_allocated": "bytes",
    "torch.cuda_reserved": "bytes",
    "torch.cuda_peak": "bytes",
    "step.duration": "s",
    "step.data_wait": "s",
    "step.batch_size": "samples",  # device `rank:N`: one value per step/request, at its end
    "host.cpu_percent": "%",  # device `host`: every process on the host, % of all its cores
    "host.memory_used": "bytes",  # device `host`: MemTotal - MemAvailable
    "host.memory_total": "bytes",
    "run.phase": "phase",  # device `rank:N`: the phase (PHASES) that begins at each time
}

# Features a server lists in its answer to `start`; an agent uses one only once listed, so a
# newer agent still talks to an older server.
FEATURE_PACKED_ARRAYS = "packed-arrays"


def pack_floats(values: Iterable[float]) -> str:
    """A batch array in its packed form: the standard base64 of the values as little-endian
    float64 (docs/protocol.md). Exact for every float, and for integers up to 2**53."""
    packed = array("d", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


STEP_ARRAYS = ("index", "t", "duration", "data_wait")  # the arrays of a batch's `steps`


def pack_batch_arrays(body: dict[str, Any]) -> None:
    """Packs every array of a batch body in place: each metric's `t` and `v`, and the
    STEP_ARRAYS of its `steps`."""
    for series in body["metrics"]:
        series["t"] = pack_floats(series["t"])
        series["v"] = pack_floats(series["v"])
    steps = body.get("steps")
    if steps:
        for name in STEP_ARRAYS:
            steps[name] = pack_floats(steps[name])


def unpack_floats(text: str) -> list[float]:
    """The values of a packed array; ValueError when `text` is not one."""
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise ValueError(f"not base64: {error}") from None
    if len(data) % 8:
        raise ValueError(f"{len(data)} bytes is not a whole number of float64 values")
    values = array("d")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


STEP_DURATION = "step.duration"
STEP_DATA_WAIT = "step.data_wait"
STEP_BATCH_SIZE = "step.batch_size"
# A script that trains, then serves: the model's calls after its last optimizer step (device
# `rank:N`, one value per call at its end: its time in the model, its batch size).
REQUEST_DURATION = "request.duration"
REQUEST_BATCH_SIZE = "request.batch_size"
METRICS.update({REQUEST_DURATION: "s", REQUEST_BATCH_SIZE: "samples"})
# A script that trains, then serves: its model calls after the last optimizer step (timed,
# sent as the request series above), and those of another instance of its class (not timed).
FACT_SERVED = "serving.after_training"
FACT_SERVED_UNTIMED = "serving.untimed_after_training"

# The step anatomy (agent/perfweb_agent/runtime/anatomy.py): each step's time split into these
# phases, series `step.phase.<phase>` on the rank's device, in seconds, at the step's end time. The
# phases of one step sum to its duration; `other` is what no hook claimed (the loss, the
# script's own Python). `copy` is host-to-device, `output_copy` device-to-host.
STEP_PHASE_PREFIX = "step.phase."
STEP_PHASES = (
    "data",
    "copy",
    "forward",
    "backward",
    "optimizer",
    "collective",
    "output_copy",
    "other",
)


def step_phase_series(phase: str) -> str:
    """The series name of one phase of the step anatomy (`step.phase.forward`)."""
    return STEP_PHASE_PREFIX + phase


# device `rank:N`: one value per step and phase, at the step's end
METRICS.update({step_phase_series(phase): "s" for phase in STEP_PHASES})

# Scalars the script logs (perfweb_agent.log, the framework callbacks): series `scalar.<name>` on
# the rank's device, one sample per logged value. A name is 1-56 characters
# `[a-z][a-z0-9_.]`, so that the series name fits METRIC_NAME_RE.
SCALAR_PREFIX = "scalar."
SCALAR_NAME_RE = re.compile(r"^[a-z][a-z0-9_.]{0,55}$")
MAX_SCALAR_NAMES = 64  # distinct scalar names one process sends; later new names are dropped

# Train/eval phases (perfweb_agent.phase, the framework callbacks): series `run.phase` on the rank's
# device, one sample per change, the value the code of the phase that begins then.
RUN_PHASE = "run.phase"
PHASES: dict[str, int] = {"none": 0, "train": 1, "eval": 2, "test": 3, "predict": 4}
RUN_NAME_MAX = 200  # characters of a run's name (start's `name`, a batch's `run_name`)

# The ingest bodies' limits: the server refuses a body past one (perfweb/runs/schemas.py) and
# the agent cuts or drops what it sends to fit (perfweb_agent.core.sanitize).
HOST_MAX = 255  # characters of start's `host`
CWD_MAX = 1000  # characters of start's `cwd`
COMMAND_ARGS_MAX = 10_000  # entries of start's `command`
DEVICE_NAME_MAX = 200  # characters of a device's `name`
DEVICE_KIND_MAX = 16  # characters of a device's `kind`
DEVICE_UUID_MAX = 100  # characters of a device's `uuid`
DEVICES_MAX = 1_000  # entries of a body's `devices`
SERIES_PER_BATCH_MAX = 10_000  # entries of a batch's `metrics` (and of its steps' series)
TAGS_OR_FACTS_MAX = 10_000  # keys of a body's `tags` or `facts`
PRODUCED_KEYS_MAX = 100  # keys of a finish's `produced`


def scalar_name(raw: str) -> str | None:
    """A framework's metric name made a scalar name (`val/loss` -> `val.loss`, `Eval Loss`
    -> `eval_loss`), or None when nothing of it is left."""
    name = re.sub(r"[^a-z0-9_.]+", "_", raw.strip().lower().replace("/", "."))
    name = re.sub(r"\.{2,}", ".", name).strip("._")
    if name and not name[0].isalpha():
        name = "m_" + name
    name = name[:56].rstrip("._")
    return name if SCALAR_NAME_RE.match(name) else None


def rank_device(rank: int | None) -> str:
    """The device key under which a rank's step series are stored."""
    return f"rank:{rank or 0}"


@dataclass(frozen=True)
class DeviceNaming:
    """How one process names its devices, so that no two processes of a run share a series.

    A single process reports `process`, `workers` and `gpu:<index>`. In a job of several ranks
    each rank's own process and workers carry the rank (`process:3`, `workers:3`); in a job of
    several hosts the GPUs carry the node (`gpu:0:n1`), since every host has a GPU 0.
    """

    rank: int | None = None
    node: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DeviceNaming:
        """The naming for a process launched with torchrun-style RANK/WORLD_SIZE variables."""

        def number(name: str) -> int | None:
            value = env.get(name, "").strip()
            return int(value) if value.isdigit() else None

        world = number("WORLD_SIZE") or 1
        rank = number("RANK")
        if world <= 1 or rank is None:
            return cls()
        local_world = number("LOCAL_WORLD_SIZE") or world
        node = None
        if world > local_world:
            group_rank = number("GROUP_RANK")
            node = group_rank if group_rank is not None else rank // local_world
        return cls(rank=rank, node=node)

    def process(self) -> str:
        """The device of this process's own CPU/RSS/threads series."""
        return "process" if self.rank is None else f"process:{self.rank}"

    def workers(self) -> str:
        """The device of this process's DataLoader workers, summed."""
        return "workers" if self.rank is None else f"workers:{self.rank}"

    def host(self) -> str:
        """The device of the host-wide CPU and memory series (one per node)."""
        return "host" if self.node is None else f"host:n{self.node}"

    def gpu(self, index: int | str) -> str:
        """The device of the GPU with this NVML index on this host."""
        return f"gpu:{index}" if self.node is None else f"gpu:{index}:n{self.node}"
