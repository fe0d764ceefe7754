"""The rows of a run's aligned timeline: which series each row draws, and what an empty row says.

The browser draws them (static/dashboard/js/timeline.js); keeping the list here lets the
server-side tests and any later panel (fixes, alerts) name the same rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from perfweb_contract.protocol import (
    METRICS,
    PHASES,
    RUN_PHASE,
    SCALAR_PREFIX,
    STEP_DATA_WAIT,
    STEP_DURATION,
    STEP_PHASES,
    step_phase_series,
)


@dataclass(frozen=True)
class TimelineRow:
    key: str
    title: str
    unit: str
    metrics: tuple[str, ...]
    group: str  # consecutive empty rows of one group are reported in a single line
    empty: str  # what the one line says when the row has no data
    max_value: float | None = None  # a fixed top for the y axis (GPU %: 100); else autorange
    pending: str = "no samples yet."  # said instead of `empty` when the run has such devices


GPU_EMPTY = "no GPU samples — the agent found no GPU it could read through NVML on this host."

ROWS: tuple[TimelineRow, ...] = (
    TimelineRow(
        "gpu_util",
        "GPU utilisation",
        METRICS["gpu.utilization"],
        ("gpu.utilization",),
        "gpu",
        GPU_EMPTY,
        max_value=100.0,
    ),
    TimelineRow(
        "gpu_memory",
        "GPU memory used",
        METRICS["gpu.memory_used"],
        ("gpu.memory_used",),
        "gpu",
        GPU_EMPTY,
    ),
    TimelineRow("gpu_power", "GPU power", METRICS["gpu.power"], ("gpu.power",), "gpu", GPU_EMPTY),
    TimelineRow(
        "gpu_temperature",
        "GPU temperature",
        METRICS["gpu.temperature"],
        ("gpu.temperature",),
        "gpu",
        GPU_EMPTY,
    ),
    TimelineRow(
        "cpu",
        "Process CPU",
        METRICS["process.cpu_percent"],
        ("process.cpu_percent",),
        "process",
        "no process samples yet.",
    ),
    TimelineRow(
        "rss",
        "Process memory (RSS)",
        METRICS["process.rss"],
        ("process.rss",),
        "process",
        "no process samples yet.",
    ),
    TimelineRow(
        "host_cpu",
        "Host CPU (every process on the host)",
        "%",
        ("host.cpu_percent",),
        "host",
        "no host-wide samples — this agent does not report them.",
        max_value=100.0,
    ),
    TimelineRow(
        "steps",
        "Step time and data wait",
        METRICS[STEP_DURATION],
        (STEP_DURATION, STEP_DATA_WAIT),
        "steps",
        "no steps recorded yet — the agent times them from the optimizer, backward passes, the "
        "outermost module or the DataLoader; perfweb_agent.step() marks them by hand.",
    ),
    TimelineRow(
        "anatomy",
        "Where the step goes (rolling median per phase, stacked)",
        "s",
        tuple(step_phase_series(phase) for phase in STEP_PHASES),
        "steps",
        "no step anatomy yet — the agent splits each step into data, copy, forward, backward, "
        "optimizer, collective and other; an agent older than that sends step times only.",
    ),
)
TRAINING_ONLY = ("steps",)  # an inference run's requests are charted as latency percentiles


def timeline_rows_config(*, kind: str | None = None) -> list[dict[str, object]]:
    """The rows as JSON-ready dicts for the page's script; an inference run (`kind`) has no
    step-time row (its requests have their own latency and throughput charts)."""
    rows = [row for row in ROWS if kind != "inference" or row.key not in TRAINING_ONLY]
    return [asdict(row) for row in rows]


# rows for the script's scalars (perfweb_agent.log), the first by name; the rest
SCALAR_ROWS_MAX = 16
# are listed in one line and stay in the read API


def timeline_extras_config() -> dict[str, object]:
    """What the page's script draws beyond ROWS: one row per scalar series (`scalar.<name>`,
    up to SCALAR_ROWS_MAX), and the `run.phase` series as shaded bands across every row."""
    return {
        "scalarPrefix": SCALAR_PREFIX,
        "scalarRowsMax": SCALAR_ROWS_MAX,
        "phaseSeries": RUN_PHASE,
        "phases": {str(code): name for name, code in PHASES.items()},
    }
