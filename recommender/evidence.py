"""What the rules read: one run's facts, metric series, step timings and analysed traces.

Two adapters fill `RunEvidence`: `perfweb_recommender.offline` from an agent's offline directory,
and the server's (perfweb) from its stored data. Rules never do I/O; they only read this.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from perfweb_recommender.analysis.summary import TraceSummary

_DATALOADER_KEY = re.compile(r"^dataloader\.(\d+)\.(\w+)$")


@dataclass(frozen=True)
class StepSample:
    """One training/inference step as the agent timed it (protocol `steps`)."""

    rank: int
    index: int
    t: float  # Unix seconds, end of the step
    duration_s: float
    data_wait_s: float | None = None  # time blocked in the DataLoader iterator


@dataclass
class Series:
    """One metric series (protocol `metrics[i]`): name/unit in
    `perfweb_contract.protocol.METRICS`."""

    device: str  # "gpu:0", "process", "workers", "host", "rank:0"
    name: str  # e.g. "gpu.utilization"
    t: list[float]
    v: list[float]


@dataclass
class RunEvidence:
    """Everything known about one run. Every field may be empty; rules check what they need."""

    facts: dict[str, Any] = field(default_factory=dict)  # merged start + batch facts, later wins
    series: list[Series] = field(default_factory=list)
    steps: list[StepSample] = field(default_factory=list)
    traces: list[TraceSummary] = field(default_factory=list)  # one per rank trace analysed
    devices: list[dict[str, Any]] = field(default_factory=list)  # protocol `devices`
    world_size: int | None = None
    verified_gains: dict[str, float] = field(default_factory=dict)  # id -> measured gain
    # How the run ended, where a launcher said so: its exit status, and the processes whose
    # agent never sent its final data ("rank 0", "the script"; coverage.ended_early).
    exit_code: int | None = None
    silent_agents: list[str] = field(default_factory=list)

    def fact(self, key: str, default: Any = None) -> Any:
        """A fact's value, or `default` when the agent did not report it."""
        value = self.facts.get(key)
        return default if value is None else value

    def points(self, name: str, device: str | None = None) -> list[tuple[float, float]]:
        """All (t, v) samples of a metric (optionally one device), in time order."""
        points: list[tuple[float, float]] = []
        for series in self.series:
            if series.name == name and (device is None or series.device == device):
                points += zip(series.t, series.v, strict=False)
        return sorted(points)

    def values(self, name: str, device: str | None = None) -> list[float]:
        """All values of a metric (optionally one device), in time order."""
        return [v for _, v in self.points(name, device)]

    def process_values(self, name: str) -> list[float]:
        """A process metric of the job's own processes: `process`, or every rank's
        `process:<rank>` in a job of several ranks (see perfweb_contract.protocol.DeviceNaming)."""
        return [
            v
            for device in self.devices_of(name)
            if device == "process" or device.startswith("process:")
            for v in self.values(name, device)
        ]

    def devices_of(self, name: str) -> list[str]:
        """Devices that have a series of this metric."""
        return sorted({s.device for s in self.series if s.name == name})

    def dataloaders(self) -> list[dict[str, Any]]:
        """The DataLoader facts grouped per loader: [{"num_workers": 0, ...}, ...]."""
        loaders: dict[int, dict[str, Any]] = {}
        for key, value in self.facts.items():
            match = _DATALOADER_KEY.match(key)
            if match:
                loaders.setdefault(int(match.group(1)), {})[match.group(2)] = value
        return [loaders[i] for i in sorted(loaders)]

    def steady_steps(self) -> list[StepSample]:
        """Steps without each rank's first few (warm-up: compilation, worker start, caches)."""
        by_rank: dict[int, list[StepSample]] = {}
        for step in sorted(self.steps, key=lambda s: (s.rank, s.index)):
            by_rank.setdefault(step.rank, []).append(step)
        steady: list[StepSample] = []
        for rank_steps in by_rank.values():
            skip = min(3, len(rank_steps) // 5)
            steady += rank_steps[skip:]
        return steady

    def median_step_s(self) -> float | None:
        """Median steady step duration (s), None without steps."""
        steps = self.steady_steps()
        return statistics.median(s.duration_s for s in steps) if steps else None

    def uses_cuda(self) -> bool:
        """Whether the run used a GPU (facts, devices, or GPU activity in a trace)."""
        if self.fact("cuda.initialized") or self.fact("cuda.device_count", 0):
            return True
        return any(t.launch.get("kernels", 0) for t in self.traces)
