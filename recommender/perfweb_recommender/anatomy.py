"""The step anatomy: where each step's time goes, from the agent's `step.phase.<phase>`
series (perfweb_contract.protocol.STEP_PHASES), one value per step at its end time.

Each rank's first steps (compilation, autotuning, caches, worker start) are kept out of the
medians and named: the leading steps slower than WARMUP_FACTOR x the rank's steady median
(at most WARMUP_MAX_SHARE of its steps), and never fewer than `RunEvidence.steady_steps`
leaves out. The run page, `/metrics`, the compare page, `analyze` and the rules all read
this one function.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from perfweb_contract import protocol
from perfweb_recommender.evidence import RunEvidence, StepSample

PHASES = protocol.STEP_PHASES
WARMUP_FACTOR = 1.5  # a leading step this much slower than the steady median is warm-up
WARMUP_MAX_SHARE = 0.1  # of a rank's steps, at most, counted as warm-up
MIN_STEPS = 5  # steady steps with phases a rank needs to be described


@dataclass(frozen=True)
class Warmup:
    """A rank's first steps, kept out of the medians."""

    rank: int
    steps: int
    seconds: float  # their total time
    ratio: float  # their mean step over the steady median

    def text(self) -> str:
        """ "steps 0-2 of rank 0 (warm-up: 1.93 s, 3.1x a steady step)"."""
        span = "step 0" if self.steps == 1 else f"steps 0-{self.steps - 1}"
        cost = f"{self.seconds:.2f} s, {self.ratio:.1f}x a steady step"
        return f"{span} of rank {self.rank} (warm-up: {cost})"


@dataclass(frozen=True)
class RankAnatomy:
    """One rank's steady steps split into phases."""

    rank: int
    steps: int  # steady steps with phases
    median_step_s: float
    phases: dict[str, float]  # median seconds per phase
    sum_error: float  # median over steps of |sum of phases - duration| / duration
    # median seconds per phase over the first and the last third of the steady steps
    first_third: dict[str, float] = field(default_factory=dict)
    last_third: dict[str, float] = field(default_factory=dict)

    @property
    def shares(self) -> dict[str, float]:
        """Each phase's share of the step: its median over the sum of the medians."""
        total = sum(self.phases.values())
        return {name: (v / total if total else 0.0) for name, v in self.phases.items()}


@dataclass(frozen=True)
class Anatomy:
    """The run's step anatomy: per rank, and the run's (rank 0, or the lowest rank)."""

    ranks: list[RankAnatomy]
    warmup: list[Warmup]

    @property
    def main(self) -> RankAnatomy:
        """The rank that describes the run (the lowest)."""
        return self.ranks[0]

    @property
    def phases(self) -> dict[str, float]:
        """The run's median seconds per phase (its main rank's)."""
        return self.main.phases

    @property
    def shares(self) -> dict[str, float]:
        """The run's share of the step per phase."""
        return self.main.shares

    def largest(self, *, measured_only: bool = False) -> str:
        """The phase that takes the most time (`measured_only`: not `other`)."""
        phases = {k: v for k, v in self.phases.items() if not (measured_only and k == "other")}
        return max(phases, key=lambda k: phases[k])

    def as_json(self) -> dict[str, Any]:
        """JSON form (the CLI's `run.anatomy`, the run page's header)."""
        main = self.main
        return {
            "rank": main.rank,
            "steps": main.steps,
            "median_step_s": main.median_step_s,
            "phases_s": dict(main.phases),
            "shares": {k: round(v, 4) for k, v in main.shares.items()},
            "largest": self.largest(),
            "sum_error": round(main.sum_error, 4),
            "ranks": [
                {
                    "rank": r.rank,
                    "steps": r.steps,
                    "median_step_s": r.median_step_s,
                    "phases_s": dict(r.phases),
                }
                for r in self.ranks
            ],
            "warmup": [
                {
                    "rank": w.rank,
                    "steps": w.steps,
                    "seconds": w.seconds,
                    "ratio": w.ratio,
                    "text": w.text(),
                }
                for w in self.warmup
            ],
        }

    def text(self) -> str:
        """ "step 73.4 ms: backward 57%, forward 20%, optimizer 14%, ..." (phases over 0.5%)."""
        shares = sorted(self.shares.items(), key=lambda kv: -kv[1])
        parts = [f"{name} {share:.0%}" for name, share in shares if share >= 0.005]
        return f"step {self.main.median_step_s * 1e3:.1f} ms: " + ", ".join(parts)


def phase_columns(evidence: RunEvidence) -> dict[int, dict[float, dict[str, float]]]:
    """rank -> step end time -> phase -> seconds, as the agent sent them."""
    columns: dict[int, dict[float, dict[str, float]]] = {}
    for series in evidence.series:
        if not series.name.startswith(protocol.STEP_PHASE_PREFIX):
            continue
        phase = series.name[len(protocol.STEP_PHASE_PREFIX) :]
        if phase not in PHASES or not series.device.startswith("rank:"):
            continue
        rank = int(series.device.partition(":")[2] or 0)
        by_time = columns.setdefault(rank, {})
        for t, v in zip(series.t, series.v, strict=False):
            by_time.setdefault(t, {})[phase] = v
    return columns


def step_anatomy(evidence: RunEvidence) -> Anatomy | None:
    """The run's step anatomy, None when the agent sent no phases (an older agent, or fewer
    than MIN_STEPS steady steps on every rank)."""
    columns = phase_columns(evidence)
    if not columns:
        return None
    by_rank: dict[int, list[StepSample]] = {}
    for step in sorted(evidence.steps, key=lambda s: (s.rank, s.index, s.t)):
        by_rank.setdefault(step.rank, []).append(step)
    ranks: list[RankAnatomy] = []
    warmups: list[Warmup] = []
    for rank in sorted(by_rank):
        phases_at = columns.get(rank, {})
        steps = by_rank[rank]
        skip = warmup_steps(steps)
        if skip:
            durations = [s.duration_s for s in steps]
            steady = statistics.median(durations[skip:]) if len(durations) > skip else 0.0
            seconds = sum(durations[:skip])
            warmups.append(Warmup(rank, skip, seconds, seconds / skip / steady if steady else 0.0))
        described = _rank_anatomy(rank, steps[skip:], phases_at)
        if described is not None:
            ranks.append(described)
    return Anatomy(ranks=ranks, warmup=warmups) if ranks else None


def warmup_steps(steps: list[StepSample]) -> int:
    """How many of a rank's first steps (in order) are warm-up."""
    count = len(steps)
    floor = min(3, count // 5)  # what RunEvidence.steady_steps leaves out
    if count < MIN_STEPS:
        return floor
    steady = statistics.median(s.duration_s for s in steps[count // 2 :])
    limit = max(floor, int(count * WARMUP_MAX_SHARE))
    slow = 0
    while slow < limit and steps[slow].duration_s > WARMUP_FACTOR * steady:
        slow += 1
    return max(floor, slow)


def _rank_anatomy(
    rank: int, steps: list[StepSample], phases_at: dict[float, dict[str, float]]
) -> RankAnatomy | None:
    rows = [(s, phases_at[s.t]) for s in steps if s.t in phases_at]
    if len(rows) < MIN_STEPS:
        return None
    used = [name for name in PHASES if any(p.get(name) for _, p in rows)] or ["other"]
    errors = [
        abs(sum(p.values()) - s.duration_s) / s.duration_s for s, p in rows if s.duration_s > 0
    ]
    third = max(1, len(rows) // 3)
    return RankAnatomy(
        rank=rank,
        steps=len(rows),
        median_step_s=statistics.median(s.duration_s for s, _ in rows),
        phases=_medians(rows, used),
        sum_error=statistics.median(errors) if errors else 0.0,
        first_third=_medians(rows[:third], used),
        last_third=_medians(rows[-third:], used),
    )


def _medians(rows: list[tuple[StepSample, dict[str, float]]], names: list[str]) -> dict[str, float]:
    return {name: statistics.median(p.get(name, 0.0) for _, p in rows) for name in names}


@dataclass(frozen=True)
class PhaseDiff:
    """B's step against A's, phase by phase (medians of each run's main rank)."""

    a_step_s: float
    b_step_s: float
    deltas: dict[str, float]  # B - A, seconds per step, each phase either run has

    @property
    def step_delta_s(self) -> float:
        """B's median step minus A's."""
        return self.b_step_s - self.a_step_s

    def largest(self) -> str:
        """The phase that moved most in the direction of the step's change."""
        sign = 1.0 if self.step_delta_s >= 0 else -1.0
        return max(self.deltas, key=lambda name: sign * self.deltas[name])

    def text(self, *, b_label: str = "B") -> str:
        """ "B's step is 23.0 ms slower; 19.0 ms of it is the optimizer"."""
        delta = self.step_delta_s
        if abs(delta) < 1e-6 or not self.deltas:
            return f"{b_label}'s step takes as long as A's, phase by phase."
        phase = self.largest()
        moved = self.deltas[phase]
        way = "slower" if delta > 0 else "faster"
        name = f"the {phase.replace('_', ' ')}"
        if phase == "other":
            name = "what no hook claims (other)"
        if moved * delta <= 0:
            return f"{b_label}'s step is {abs(delta) * 1e3:.1f} ms {way}, in no single phase."
        return (
            f"{b_label}'s step is {abs(delta) * 1e3:.1f} ms {way}; "
            f"{abs(moved) * 1e3:.1f} ms of it is {name}."
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form (the compare page)."""
        return {
            "a_step_s": self.a_step_s,
            "b_step_s": self.b_step_s,
            "step_delta_s": self.step_delta_s,
            "deltas_s": dict(self.deltas),
            "largest": self.largest() if self.deltas else None,
            "text": self.text(),
        }


def phase_diff(a: Anatomy, b: Anatomy) -> PhaseDiff:
    """B against A by phase: the change of each phase's median step time."""
    names = [n for n in PHASES if n in a.phases or n in b.phases]
    deltas = {n: b.phases.get(n, 0.0) - a.phases.get(n, 0.0) for n in names}
    return PhaseDiff(a.main.median_step_s, b.main.median_step_s, deltas)
