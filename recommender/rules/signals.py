"""Small derived signals several rules share (pure functions of RunEvidence)."""

from __future__ import annotations

import statistics

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence


def data_wait_share(evidence: RunEvidence) -> float | None:
    """Share of steady step time spent blocked on the DataLoader (agent step timings)."""
    steps = [s for s in evidence.steady_steps() if s.data_wait_s is not None]
    total = sum(s.duration_s for s in steps)
    if not steps or total <= 0:
        return None
    return sum(s.data_wait_s or 0.0 for s in steps) / total


def trace_step_us(trace: TraceSummary) -> float:
    """The time a trace's shares refer to: mean steady step (µs), else the kernel span."""
    return trace.mean_step_us or trace.temporal.kernel_span_us


def per_step(trace: TraceSummary, count: float) -> float:
    """A whole-trace count divided by the number of profiled steps (or the count itself)."""
    return count / len(trace.steps) if trace.steps else count


def trace_share(trace: TraceSummary, micros: float) -> float:
    """`micros` spread over the trace's steps, as a share of a step."""
    step = trace_step_us(trace)
    if step <= 0:
        return 0.0
    return per_step(trace, micros) / step if trace.steps else micros / step


def median(values: list[float]) -> float | None:
    """Median, None for an empty list."""
    return statistics.median(values) if values else None


def ranks_per_host(evidence: RunEvidence) -> int:
    """Processes of this job on one host (LOCAL_WORLD_SIZE, else 1)."""
    value = evidence.fact("env.local_world_size")
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def usable_cores(evidence: RunEvidence) -> int | None:
    """CPU cores this process may use (affinity), from the facts."""
    value = evidence.fact("host.usable_cores", evidence.fact("host.cpu_count"))
    return int(value) if isinstance(value, (int, float)) else None


def compute_capability(evidence: RunEvidence) -> tuple[int, int] | None:
    """The GPU's compute capability from the facts or a trace's deviceProperties."""
    text = evidence.fact("cuda.capability")
    if isinstance(text, str) and "." in text:
        major, _, minor = text.partition(".")
        if major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    for trace in evidence.traces:
        if trace.compute_capability:
            return trace.compute_capability
    return None


def loop_busy_share(evidence: RunEvidence) -> float | None:
    """Share of the wall time the loop spent inside its steps or requests (summed over ranks,
    per rank), None without steps. Training steps are back to back (~1); a serving loop's
    requests leave the gaps in which it waits for the next one."""
    steps = evidence.steps
    if not steps:
        return None
    start = min(s.t - s.duration_s for s in steps)
    span = max(s.t for s in steps) - start
    ranks = len({s.rank for s in steps})
    return min(1.0, sum(s.duration_s for s in steps) / (span * ranks)) if span > 0 else None


def gpu_busy_share(trace: TraceSummary) -> float:
    """Share of the traced kernel span the GPU was busy (0 when no kernel was traced)."""
    t = trace.temporal
    return 1 - t.idle_us / t.kernel_span_us if t.kernel_span_us else 0.0


def gpu_memory_total(evidence: RunEvidence) -> float | None:
    """The smallest GPU's memory, in bytes, as the agent reported the devices (None: no GPU)."""
    totals = [
        float(d["memory_total"])
        for d in evidence.devices
        if d.get("kind") == "gpu" and isinstance(d.get("memory_total"), (int, float))
    ]
    totals = [t for t in totals if t > 0]
    return min(totals) if totals else None


def peak_gpu_memory(evidence: RunEvidence) -> float | None:
    """The run's peak GPU memory: torch's own peak where the agent saw it, else NVML's used."""
    values = evidence.values("torch.cuda_peak") or evidence.values("gpu.memory_used")
    return max(values) if values else None
