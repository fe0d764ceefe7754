"""The compact, column-oriented form of one rank's Kineto trace.

Only what the analyses need is kept: GPU activity, the host calls that launch or wait on it,
CPU operator intervals and the profiler steps. Times are float64 microseconds relative to
the earliest event, `base_us + origin_us` (so nanosecond digits survive: see
`perfweb_recommender.trace.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# GPU activity kinds (column `gpu_kind`).
KIND_KERNEL = 0
KIND_MEMCPY = 1
KIND_MEMSET = 2
KIND_SYNC = 3  # cuda_sync: Stream/Event/Context Sync, shown on a stream
KIND_OTHER = 4

# Kernel types, HTA's vocabulary (column `gpu_type`).
TYPE_COMPUTATION = 0
TYPE_COMMUNICATION = 1
TYPE_MEMORY = 2
TYPE_OTHER = 3
TYPE_NAMES = ("COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER")

# CPU interval classes (column `cpu_class`).
CPU_OP = 0
CPU_ANNOTATION = 1
CPU_DATALOADER = 2


@dataclass
class GpuEvents:
    """GPU activity on streams: kernels, memcpy, memset and sync markers."""

    ts: np.ndarray  # float64 µs, relative to the trace's base
    dur: np.ndarray  # float64 µs
    stream: np.ndarray  # int64
    kind: np.ndarray  # int8, KIND_*
    gpu_type: np.ndarray  # int8, TYPE_*
    name_id: np.ndarray  # int32, index into RankTrace.gpu_names
    correlation: np.ndarray  # int64, -1 when absent
    nbytes: np.ndarray  # int64, memcpy/memset bytes, 0 when absent

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def subset(self, mask: np.ndarray) -> GpuEvents:
        """The events selected by a boolean mask or an index array."""
        return GpuEvents(
            ts=self.ts[mask],
            dur=self.dur[mask],
            stream=self.stream[mask],
            kind=self.kind[mask],
            gpu_type=self.gpu_type[mask],
            name_id=self.name_id[mask],
            correlation=self.correlation[mask],
            nbytes=self.nbytes[mask],
        )

    @property
    def end(self) -> np.ndarray:
        """End times (µs)."""
        return self.ts + self.dur


@dataclass
class HostCalls:
    """CUDA runtime / driver calls on the host (launches, copies, synchronisations)."""

    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    correlation: np.ndarray  # int64
    name_id: np.ndarray  # int32, index into RankTrace.runtime_names

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class CpuIntervals:
    """CPU operator and annotation intervals (ProfilerStep itself excluded)."""

    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    cpu_class: np.ndarray  # int8, CPU_*
    name_id: np.ndarray  # int32, index into RankTrace.cpu_names

    def __len__(self) -> int:
        return int(self.ts.shape[0])


@dataclass
class Step:
    """One `ProfilerStep#N` annotation."""

    number: int
    ts: float  # µs, relative
    dur: float  # µs


@dataclass
class RankTrace:
    """Everything the analyses need from one rank's trace, and nothing more."""

    rank: int
    source: str
    base_us: float  # integer-valued part of the absolute time (µs) cut off while parsing
    origin_us: float  # absolute time = base_us + origin_us + a relative time
    gpu: GpuEvents
    host: HostCalls
    cpu: CpuIntervals
    steps: list[Step]
    gpu_names: list[str]
    runtime_names: list[str]
    cpu_names: list[str] = field(default_factory=list)  # CPU operator and annotation names
    cpu_op_counts: dict[str, int] = field(default_factory=dict)
    world_size: int | None = None
    backend: str | None = None
    compute_capability: tuple[int, int] | None = None
    fractional_timestamps: bool = False
    steps_from_profiler: bool = True  # False: steps inferred from Optimizer.step annotations
    compiled_regions: int = 0  # CPU events of torch.compile'd code (CompiledFxGraph, ...)
    backward_ops: int = 0  # autograd engine CPU events: the trace includes backward passes
    gpu_steps: list[tuple[float, float]] = field(default_factory=list)  # GPU ProfilerStep spans
    degraded: str | None = None  # over the memory budget: what was skipped (trace.budget)
