"""What the rules read: one run's facts, metric series, step timings and analysed traces.

Two adapters fill `RunEvidence`: `perfweb_recommender.offline` from an agent's offline directory,
and the server's (perfweb) from its stored data. Rules never do I/O; they only read this.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
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


@dataclass(frozen=True)
class ProcessSeen:
    """One process whose agent reported into the run (its start message): the launcher, a
    rank (spawned, forked, started by torchrun) or the script itself."""

    host: str
    role: str  # "launcher" | "worker"
    rank: int | None = None
    local_rank: int | None = None


@dataclass
class Series:
    """One metric series (protocol `metrics[i]`): name/unit in
    `perfweb_contract.protocol.METRICS`."""

    device: str  # "gpu:0", "process", "workers", "host", "rank:0"
    name: str  # e.g. "gpu.utilization"
    t: list[float]
    v: list[float]


# Replay pairs that disagree on the direction (some faster, some slower) over more than this
# spread (largest pair ratio over the smallest) measure the host, not the fix.
INCONCLUSIVE_SPREAD = 3.0


@dataclass(frozen=True)
class Replayed:
    """One case of the replay (perfweb_recommender.replay): the run's recorded shapes run
    both ways on this host in a helper process; A is what the run does, B the fix."""

    case: str  # "linear" (int8), "conv" (channels_last), "attention" (SDPA), "ops" (autograd)
    ratio: float  # B's CPU time over A's, median over the interleaved pairs (< 1: B faster)
    ratio_min: float
    ratio_max: float
    pairs: int
    a_us: float  # median CPU time of one pass over the case's calls in A (µs)
    b_us: float
    calls: int  # operator calls in one pass
    share: float  # the case's share of the traced span (what the fix acts on)
    threads: int  # intra-op threads the replay ran with (the run's)
    wall_ratio: float | None = None  # the same ratio on wall time (median), for reference
    skipped: int = 0  # recorded operators the replay could not rebuild (case "ops")

    @property
    def speedup(self) -> float:
        return 1.0 / self.ratio if self.ratio > 0 else float("inf")

    @property
    def gain(self) -> float:
        """Fraction of the traced time the fix recovers (negative: it costs time)."""
        return self.share * (1.0 - self.ratio)

    @property
    def conclusive(self) -> bool:
        """False when the pairs disagree on the direction over a wide spread
        (INCONCLUSIVE_SPREAD): what a busy host does to a small effect. The replay drops such
        a case, and its rule estimates from the trace or a prior instead."""
        mixed = self.ratio_min < 1.0 < self.ratio_max
        return not (mixed and self.ratio_max > INCONCLUSIVE_SPREAD * self.ratio_min)

    @property
    def call_us(self) -> float:
        """CPU time of one call in A (µs)."""
        return self.a_us / self.calls if self.calls else 0.0

    def figure(self) -> str:
        """'1.52x faster (1.31-1.70x, 7 pairs)': the speed-up and its spread."""
        low, high = 1.0 / self.ratio_max, 1.0 / self.ratio_min
        word = "faster" if self.ratio < 1 else "slower" if self.ratio > 1 else "the same"
        factor = self.speedup if self.ratio < 1 else self.ratio
        return (
            f"{factor:.2f}x {word} ({low:.2f}-{high:.2f}x speed-up over {self.pairs} "
            f"interleaved pairs, CPU time, {self.threads} thread{'s' if self.threads != 1 else ''})"
        )


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
    # agent never sent its final data ("rank 0", "the script"; run_end.ended_early).
    exit_code: int | None = None
    silent_agents: list[str] = field(default_factory=list)
    processes: list[ProcessSeen] = field(default_factory=list)  # every agent of the run
    # Module calls the agent counted before the first optimizer step or backward (an
    # evaluation at iteration 0, a warm-up forward): re-labelled, not training steps.
    pre_training_calls: int = 0
    command: list[str] = field(default_factory=list)  # the run's command, as the agent saw it
    # The replay of the run's recorded shapes, per case (perfweb_recommender.replay), filled
    # before the rules run where torch is importable; `replay_note` says why there is none.
    replays: dict[str, Replayed] = field(default_factory=dict)
    replay_note: str = ""

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

    def run_queue_share(self) -> float | None:
        """Of the time the loop's main thread wanted a CPU, the share it waited on a run
        queue (agent `process.run_queue_wait` / (that + `process.thread_cpu`), medians):
        what host contention adds to its wall time; None where the agent did not sample it."""
        waits = self.process_values("process.run_queue_wait")
        ran = self.process_values("process.thread_cpu")
        if not waits or not ran:
            return None
        wait, run = statistics.median(waits), statistics.median(ran)
        return wait / (wait + run) if wait + run > 0 else None

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

    def relabel_pre_training_calls(self) -> None:
        """Drop from `steps` the module calls counted before training began (below the fact
        `steps.training_from`, each rank's own index) and count them in
        `pre_training_calls`: an evaluation or warm-up pass is not a training step."""
        first = training_from(self.facts)
        if first is None:
            return
        kept = [s for s in self.steps if s.index >= first]
        self.pre_training_calls += len(self.steps) - len(kept)
        self.steps = kept

    def ranks_by_host(self) -> dict[str, set[int]]:
        """The ranks the agents saw on each host (a rank counts once, however many agents)."""
        hosts: dict[str, set[int]] = {}
        for process in self.processes:
            if process.role != "launcher" and process.rank is not None:
                hosts.setdefault(process.host, set()).add(process.rank)
        return hosts

    def uses_cuda(self) -> bool:
        """Whether the run used a GPU (facts, devices, or GPU activity in a trace)."""
        if self.fact("cuda.initialized") or self.fact("cuda.device_count", 0):
            return True
        return any(t.launch.get("kernels", 0) for t in self.traces)


def training_from(facts: Mapping[str, Any]) -> int | None:
    """The agent's index of the first training step when module calls (an evaluation at
    iteration 0, a warm-up forward) were counted before it (fact `steps.training_from`)."""
    first = facts.get("steps.training_from")
    if not isinstance(first, int) or isinstance(first, bool) or first <= 0:
        return None
    return first


def training_step_count(*, counted: int, facts: Mapping[str, Any]) -> tuple[int, int]:
    """(training steps, module calls before training) of `counted` steps of one process (a
    server's step count): the calls below `steps.training_from` are no training steps."""
    first = training_from(facts)
    if first is None or counted <= 0:
        return max(0, counted), 0
    before = min(first, counted)
    return counted - before, before
