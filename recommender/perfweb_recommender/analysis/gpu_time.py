"""Where GPU time goes: HTA's temporal, kernel-type, overlap and idle-time breakdowns.

Definitions follow Holistic Trace Analysis so the numbers can be checked against it:
- the window: with two or more ProfilerSteps, only GPU events launched (by correlation) before
  the last step started are kept (the last step is usually cut short by the profiler);
- kernel span: first start to last end of all GPU events (any stream);
- idle: span minus the union of all GPU events; compute: union of COMPUTATION kernels;
  non-compute: the rest of the span;
- kernel breakdown: time under each combination of COMPUTATION / COMMUNICATION / MEMORY;
- comm-comp overlap: time communication and computation run together / communication time;
- step timeline (TraceLens' `gpu_timeline`): the same busy/idle split, measured inside the
  GPU-side ProfilerStep annotations instead of the first-to-last kernel span;
- idle causes per stream: each gap before a kernel/memcpy/memset is host wait when the host
  call that launched it started after the previous event ended, kernel wait when the gap is
  under `KERNEL_WAIT_THRESHOLD_US`, other otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfweb_recommender.analysis.intervals import merge, overlap_length, sweep_by_mask, total
from perfweb_recommender.trace.model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    TYPE_COMMUNICATION,
    TYPE_COMPUTATION,
    TYPE_MEMORY,
    GpuEvents,
    RankTrace,
)

STEP_SPAN_COVERAGE_MIN = 0.1  # GPU ProfilerSteps shorter than this share of the kernel span
KERNEL_WAIT_THRESHOLD_US = 30.0  # HTA's consecutive_kernel_delay: gaps below this are launch gaps
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
_BREAKDOWN_TYPES = (
    ("COMPUTATION", TYPE_COMPUTATION),
    ("COMMUNICATION", TYPE_COMMUNICATION),
    ("MEMORY", TYPE_MEMORY),
)


@dataclass
class Temporal:
    """Idle / compute / non-compute time over the kernel span (µs)."""

    idle_us: float
    compute_us: float
    non_compute_us: float
    kernel_span_us: float

    def pct(self, value: float) -> float:
        """A share of the kernel span in percent (0 when there is no span)."""
        return 100.0 * value / self.kernel_span_us if self.kernel_span_us > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        """The JSON shape of the CLI (`temporal_breakdown`)."""
        return {
            "idle_pct": round(self.pct(self.idle_us), 2),
            "compute_pct": round(self.pct(self.compute_us), 2),
            "non_compute_pct": round(self.pct(self.non_compute_us), 2),
            "idle_us": round(self.idle_us, 3),
            "compute_us": round(self.compute_us, 3),
            "non_compute_us": round(self.non_compute_us, 3),
            "kernel_span_us": round(self.kernel_span_us, 3),
        }


def analysis_window(trace: RankTrace) -> GpuEvents:
    """The GPU events HTA analyses: those launched before the last ProfilerStep began."""
    gpu = trace.gpu
    step_numbers = {s.number for s in trace.steps}
    if len(step_numbers) < 2 or not trace.steps_from_profiler:
        return gpu
    last_start = max(s.ts for s in trace.steps)
    host = trace.host
    launched = np.unique(host.correlation[(host.ts < last_start) & (host.correlation >= 0)])
    keep = (gpu.correlation >= 0) & np.isin(gpu.correlation, launched)
    return gpu.subset(keep)


def temporal_breakdown(gpu: GpuEvents) -> Temporal:
    """HTA's temporal breakdown of one rank's GPU events."""
    if len(gpu) == 0:
        return Temporal(0.0, 0.0, 0.0, 0.0)
    starts, ends = merge(gpu.ts, gpu.end)
    span = float(ends[-1] - starts[0])
    idle = span - total(starts, ends)
    comp = gpu.gpu_type == TYPE_COMPUTATION
    compute = total(*merge(gpu.ts[comp], gpu.end[comp]))
    return Temporal(idle, compute, span - compute - idle, span)


def _type_layers(gpu: GpuEvents) -> list[tuple[np.ndarray, np.ndarray]]:
    layers = []
    for _, code in _BREAKDOWN_TYPES:
        mask = gpu.gpu_type == code
        layers.append(merge(gpu.ts[mask], gpu.end[mask]))
    return layers


def kernel_breakdown_us(gpu: GpuEvents) -> dict[str, float]:
    """Time (µs) under each non-empty combination of computation/communication/memory."""
    by_mask = sweep_by_mask(_type_layers(gpu))
    result: dict[str, float] = {}
    for mask in range(1, by_mask.size):
        label = " overlapping ".join(
            name for bit, (name, _) in enumerate(_BREAKDOWN_TYPES) if mask & (1 << bit)
        )
        result[label] = float(by_mask[mask])
    return result


def kernel_breakdown(gpu: GpuEvents) -> dict[str, dict[str, float]]:
    """Kernel breakdown with each combination's time (µs) and share (%) of the covered time."""
    times = kernel_breakdown_us(gpu)
    covered = sum(times.values())
    return {
        label: {"us": round(us, 3), "pct": round(100.0 * us / covered, 2) if covered else 0.0}
        for label, us in sorted(times.items(), key=lambda kv: -kv[1])
    }


def comm_comp_overlap_pct(gpu: GpuEvents) -> float | None:
    """Share (%) of communication time overlapped by computation; None without communication."""
    comm_mask = gpu.gpu_type == TYPE_COMMUNICATION
    comm = merge(gpu.ts[comm_mask], gpu.end[comm_mask])
    comm_time = total(*comm)
    if comm_time <= 0:
        return None
    comp_mask = gpu.gpu_type == TYPE_COMPUTATION
    comp = merge(gpu.ts[comp_mask], gpu.end[comp_mask])
    return 100.0 * overlap_length(comm, comp) / comm_time


def launch_times(gpu: GpuEvents, trace: RankTrace) -> np.ndarray:
    """Start time of the host call that launched each GPU event (NaN when unknown)."""
    host = trace.host
    launch = np.full(len(gpu), np.nan)
    if len(host) == 0:
        return launch
    order = np.argsort(host.correlation, kind="stable")
    sorted_corr = host.correlation[order]
    pos = np.searchsorted(sorted_corr, gpu.correlation)
    pos_ok = np.minimum(pos, sorted_corr.size - 1)
    found = (
        (pos < sorted_corr.size) & (sorted_corr[pos_ok] == gpu.correlation) & (gpu.correlation >= 0)
    )
    launch[found] = host.ts[order[pos_ok[found]]]
    return launch


def idle_gaps(gpu: GpuEvents, trace: RankTrace) -> dict[int, dict[str, np.ndarray]]:
    """Per stream, the idle gaps before each kernel/memcpy/memset, grouped by cause (µs)."""
    work = gpu.subset(np.isin(gpu.kind, (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)))
    launch = launch_times(work, trace)
    result: dict[int, dict[str, np.ndarray]] = {}
    for stream in np.unique(work.stream):
        idx = np.flatnonzero(work.stream == stream)
        idx = idx[np.argsort(work.ts[idx], kind="stable")]
        ts, end, launched = work.ts[idx], work.end[idx], launch[idx]
        prev_end = end[:-1]
        gap = ts[1:] - prev_end
        host_wait = launched[1:] > prev_end  # NaN compares False: unknown launch is not host wait
        kernel_wait = ~host_wait & (gap < KERNEL_WAIT_THRESHOLD_US)
        other = ~host_wait & ~kernel_wait
        result[int(stream)] = {
            "host_wait": gap[host_wait],
            "kernel_wait": gap[kernel_wait],
            "other": gap[other],
        }
    return result


def idle_breakdown(gpu: GpuEvents, trace: RankTrace) -> dict[str, dict[str, dict[str, float]]]:
    """Idle time per stream and cause: {stream: {cause: {us, ratio, count}}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for stream, causes in idle_gaps(gpu, trace).items():
        sums = {cause: float(np.sum(causes[cause])) for cause in IDLE_CATEGORIES}
        stream_total = sum(sums.values())
        out[str(stream)] = {
            cause: {
                "us": round(sums[cause], 3),
                "ratio": round(sums[cause] / stream_total, 4) if stream_total else 0.0,
                **_interval_stats(causes[cause]),
            }
            for cause in IDLE_CATEGORIES
        }
    return out


def _interval_stats(gaps: np.ndarray) -> dict[str, float]:
    """Count, mean, median and max of idle intervals (µs), as HTA's interval statistics."""
    if gaps.size == 0:
        return {"count": 0}
    return {
        "count": int(gaps.size),
        "mean_us": round(float(gaps.mean()), 3),
        "median_us": round(float(np.median(gaps)), 3),
        "max_us": round(float(gaps.max()), 3),
    }


def step_timeline(trace: RankTrace) -> dict[str, float] | None:
    """TraceLens' GPU timeline over the GPU-side ProfilerStep annotations (µs and % of them;
    TraceLens' span, where `temporal_breakdown` uses HTA's first-to-last kernel span):
    computation, exposed communication (not under computation), exposed memcpy (under
    neither), busy (their sum) and idle. None when the trace has no GPU step annotation."""
    windows = merge(
        np.array([ts for ts, _ in trace.gpu_steps]),
        np.array([ts + dur for ts, dur in trace.gpu_steps]),
    )
    span = total(*windows)
    gpu = trace.gpu
    kernel_span = float(gpu.end.max() - gpu.ts.min()) if len(gpu) else 0.0
    if span <= 0 or span < STEP_SPAN_COVERAGE_MIN * kernel_span:
        return None  # no annotation, or annotations that do not cover the GPU work
    work = np.isin(gpu.kind, (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET))

    def inside(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = merge(gpu.ts[work & mask], gpu.end[work & mask])
        lo = np.concatenate([np.clip(starts, a, b) for a, b in zip(*windows, strict=True)])
        hi = np.concatenate([np.clip(ends, a, b) for a, b in zip(*windows, strict=True)])
        keep = hi > lo
        return merge(lo[keep], hi[keep])

    comp = inside(gpu.gpu_type == TYPE_COMPUTATION)
    comm = inside(gpu.gpu_type == TYPE_COMMUNICATION)
    memory = inside(gpu.gpu_type == TYPE_MEMORY)
    by_mask = sweep_by_mask([comp, comm, memory])
    computation = total(*comp)
    exposed_comm = float(by_mask[2])  # communication alone (memory may overlap: bit 2|4)
    exposed_comm += float(by_mask[6])
    exposed_memcpy = float(by_mask[4])
    busy = computation + exposed_comm + exposed_memcpy
    times = {
        "computation": computation,
        "exposed_comm": exposed_comm,
        "exposed_memcpy": exposed_memcpy,
        "busy": busy,
        "idle": span - busy,
    }
    out = {f"{k}_us": round(v, 3) for k, v in times.items()}
    out.update({f"{k}_pct": round(100.0 * v / span, 3) for k, v in times.items()})
    out["span_us"] = round(span, 3)
    out["steps"] = len(trace.gpu_steps)
    return out
