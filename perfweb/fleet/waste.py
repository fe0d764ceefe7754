"""Where a run's GPU time went: pure arithmetic over its stored samples (no I/O).

Each utilisation sample stands for the time until the next one when that comes within
`MAX_SAMPLE_GAP_S`, else for the series' usual interval; time inside the run's span that no
sample covers is *unattributed* (the agent was not
sampling: NVML missing, the process paused, data lost). Covered time is sorted into:

- busy: utilisation at or above `LOW_UTILIZATION_PCT`;
- idle holding memory: utilisation below `IDLE_PERCENT` while the GPU holds at least
  `HELD_MEMORY_BYTES` (the alert `gpu.idle_memory_held` watches the same);
- low utilisation: the rest (the GPU is the job's, mostly waiting).

The thresholds are perfweb_recommender.thresholds', which the rules and the alerts read too, so the
page, the findings and the alerts agree on what "low" and "holding memory" mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfweb_recommender.conditions import Series
from perfweb_recommender.thresholds import HELD_MEMORY_BYTES, LOW_UTILIZATION_PCT

IDLE_PERCENT = 5.0
MAX_SAMPLE_GAP_S = 10.0  # the agent samples every second; a longer gap is not guessed at
HOUR = 3600.0
JOULES_PER_KWH = 3.6e6
EDGE_S = 1e-3


@dataclass
class GpuTime:
    """Seconds of one or more GPUs' time, by where it went; energy in joules where known."""

    busy: float = 0.0
    low_utilization: float = 0.0
    idle_holding_memory: float = 0.0
    unattributed: float = 0.0
    energy_joules: float | None = None

    @property
    def total(self) -> float:
        return self.busy + self.low_utilization + self.idle_holding_memory + self.unattributed

    @property
    def wasted(self) -> float:
        """Time the GPU was the job's and did little: low utilisation plus idle holding."""
        return self.low_utilization + self.idle_holding_memory

    def add(self, other: GpuTime) -> None:
        self.busy += other.busy
        self.low_utilization += other.low_utilization
        self.idle_holding_memory += other.idle_holding_memory
        self.unattributed += other.unattributed
        if other.energy_joules is not None:
            self.energy_joules = (self.energy_joules or 0.0) + other.energy_joules

    def hours(self) -> dict[str, float]:
        return {
            "busy": self.busy / HOUR,
            "low_utilization": self.low_utilization / HOUR,
            "idle_holding_memory": self.idle_holding_memory / HOUR,
            "unattributed": self.unattributed / HOUR,
            "wasted": self.wasted / HOUR,
            "total": self.total / HOUR,
        }


def covered_durations(t: np.ndarray, start: float, end: float, max_gap: float) -> np.ndarray:
    """How long each sample at sorted times `t` stands for inside [start, end]: until the
    next sample when that comes within `max_gap`, else (a gap, or the last sample) for the
    series' typical interval, its median spacing (1 s, the agent's default, for one sample)."""
    if t.size == 0:
        return np.zeros(0)
    gaps = np.diff(t)
    typical = float(np.median(gaps)) if gaps.size else 1.0
    typical = min(typical, max_gap)
    step = np.append(gaps, typical)
    step = np.where(step <= max_gap, step, typical)
    return np.clip(np.minimum(t + step, end) - np.maximum(t, start), 0.0, None)


def gpu_time(
    *,
    utilization: Series,
    memory: Series | None,
    energy: Series | None,
    start: float,
    end: float,
    max_gap: float = MAX_SAMPLE_GAP_S,
) -> GpuTime:
    """One GPU's time over [start, end] from its utilisation, memory and energy samples."""
    result = GpuTime()
    span = max(end - start, 0.0)
    t = np.asarray(utilization.t, dtype=float)
    u = np.asarray(utilization.v, dtype=float)
    covered = covered_durations(t, start, end, max_gap)
    held = _held_at(t, memory)
    busy = u >= LOW_UTILIZATION_PCT
    idle_held = (u < IDLE_PERCENT) & held
    result.busy = float(covered[busy].sum())
    result.idle_holding_memory = float(covered[idle_held].sum())
    result.low_utilization = float(covered[~busy & ~idle_held].sum())
    result.unattributed = max(span - float(covered.sum()), 0.0)
    result.energy_joules = _energy(energy, start, end)
    return result


def core_hours(*, cpu_percent: Series, start: float, end: float) -> float:
    """CPU core-hours from samples of CPU percent of one core (100 = one core busy)."""
    t = np.asarray(cpu_percent.t, dtype=float)
    covered = covered_durations(t, start, end, MAX_SAMPLE_GAP_S)
    return float((covered * np.asarray(cpu_percent.v, dtype=float)).sum()) / 100.0 / HOUR


def _held_at(t: np.ndarray, memory: Series | None) -> np.ndarray:
    """For each time in `t`, whether the latest memory sample at or before it held memory."""
    if memory is None or not memory.t:
        return np.zeros(t.size, dtype=bool)
    memory_t = np.asarray(memory.t, dtype=float)
    memory_v = np.asarray(memory.v, dtype=float)
    latest = np.clip(np.searchsorted(memory_t, t, side="right") - 1, 0, None)
    return memory_v[latest] >= HELD_MEMORY_BYTES


def _energy(energy: Series | None, start: float, end: float) -> float | None:
    """Joules used over [start, end] from a cumulative counter; None without two readings.
    A counter that goes back (driver reload) counts only its increases."""
    if energy is None:
        return None
    t = np.asarray(energy.t, dtype=float)
    # the span's ends come from stored datetimes (microseconds): a reading taken at the very
    # start or end may sit a rounding error outside
    v = np.asarray(energy.v, dtype=float)[(t >= start - EDGE_S) & (t <= end + EDGE_S)]
    if v.size < 2:
        return None
    return float(np.clip(np.diff(v), 0.0, None).sum())


def kwh(joules: float | None) -> float | None:
    return None if joules is None else joules / JOULES_PER_KWH
