"""Small derived signals several rules share (pure functions of RunEvidence)."""

from __future__ import annotations

import statistics
from typing import Any

from perfweb_contract.loaders import training_loader_index
from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence


def data_wait_share(evidence: RunEvidence) -> float | None:
    """Share of steady step time spent blocked on the DataLoader (agent step timings)."""
    steps = [s for s in evidence.steady_steps() if s.data_wait_s is not None]
    total = sum(s.duration_s for s in steps)
    if not steps or total <= 0:
        return None
    return sum(s.data_wait_s or 0.0 for s in steps) / total


def training_loader(evidence: RunEvidence) -> tuple[int, dict[str, Any]] | None:
    """(index, facts) of the DataLoader the training loop waits on: the one that handed out
    batches in the most optimizer steps (the agent's `dataloader.N.fed_steps`; an
    evaluation loader feeds only the steps it ran in), else the first one made. None
    without DataLoader facts."""
    loaders = evidence.dataloaders()
    if not loaders:
        return None
    index = training_loader_index([_count(d.get("fed_steps")) for d in loaders]) or 0
    return index, loaders[index]


def loader_wait_fraction(evidence: RunEvidence, index: int) -> float | None:
    """The share of the loop's time blocked in DataLoaders that loader `index` caused
    (`dataloader.N.wait_s`), None when the agent did not time them per loader."""
    waits = [d.get("wait_s") for d in evidence.dataloaders()]
    if index >= len(waits) or not all(isinstance(w, (int, float)) for w in waits):
        return None
    total = sum(float(w) for w in waits if w is not None)
    own = waits[index]
    return float(own) / total if total > 0 and own is not None else None


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


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
    """Ranks of this job on one host: the most the agents saw on any one host (spawned,
    forked, torchrun's local ranks), or torchrun's LOCAL_WORLD_SIZE where it says more;
    else 1. `mp.spawn` sets no LOCAL_WORLD_SIZE: its ranks are counted from the processes."""
    seen = max((len(ranks) for ranks in evidence.ranks_by_host().values()), default=0)
    return max(1, seen, _local_world_size(evidence) or 0)


def _local_world_size(evidence: RunEvidence) -> int | None:
    value = evidence.fact("env.local_world_size")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ranks_span_hosts(evidence: RunEvidence, *, world_size: int) -> bool:
    """Whether the job's ranks run on more than one host: the agents reported from several
    hosts, or torchrun's LOCAL_WORLD_SIZE is below the world size. A world larger than the
    ranks seen proves nothing by itself (an agent may not have started)."""
    if len(evidence.ranks_by_host()) > 1:
        return True
    local = _local_world_size(evidence)
    return local is not None and 0 < local < world_size and ranks_per_host(evidence) < world_size


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


def numeric_fact(evidence: RunEvidence, key: str) -> float | None:
    """A fact's value as a number, None when absent or not a number (a flag is not one)."""
    value = evidence.fact(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
