"""Estimates from the replay (perfweb_recommender.replay): the run's own shapes run both
ways on this host. The best estimate there is (FIXES.md): it outranks a measurement or a
prior, and a fix it measures slower is not recommended, only listed as checked with the
figure (gain 0, no knob to try)."""

from __future__ import annotations

from dataclasses import dataclass

from perfweb_recommender.evidence import Replayed
from perfweb_recommender.rules.base import Evidence

SOURCE = "replay (the run's shapes, this host)"


@dataclass(frozen=True)
class ReplayEstimate:
    gain: float  # fraction of the traced time recovered, 0 when the fix is slower
    basis: str
    evidence: list[Evidence]
    slower: bool  # the replay measured the fix slower: not recommended


def replay_estimate(
    replayed: Replayed, *, current: str, fix: str, acts_on: str, cap: float = 1.0
) -> ReplayEstimate:
    """The gain, basis and evidence of a finding from its replay: `current` is what the run
    does ("fp32 nn.Linear"), `fix` the change ("int8 dynamic"), `acts_on` what the share is
    of ("nn.Linear calls")."""
    slower = replayed.ratio >= 1.0
    figure = replayed.figure()
    if slower:
        basis = f"replayed: {fix} is {figure} on this host: not recommended (checked)"
        gain = 0.0
    else:
        basis = (
            f"replayed: {fix} {figure} on this host x {replayed.share:.0%} of the traced time "
            f"in {acts_on}"
        )
        gain = min(cap, replayed.gain)
    items = [
        Evidence(f"{current}: CPU time per pass (replayed)", replayed.a_us, "µs", SOURCE),
        Evidence(f"{fix}: CPU time per pass (replayed)", replayed.b_us, "µs", SOURCE),
        Evidence(f"speed-up of {fix} (median of interleaved pairs)", replayed.speedup, "x", SOURCE),
        Evidence(
            f"speed-up of {fix}, min-max",
            f"{1 / replayed.ratio_max:.2f}-{1 / replayed.ratio_min:.2f}",
            "x",
            SOURCE,
        ),
        Evidence(f"share of the traced time in {acts_on}", replayed.share, "fraction", "trace"),
    ]
    if replayed.skipped:
        items.append(
            Evidence(
                "recorded operators the replay could not rebuild", replayed.skipped, "ops", SOURCE
            )
        )
    return ReplayEstimate(gain=gain, basis=basis, evidence=items, slower=slower)


def call_cost_evidence(replayed: Replayed, wall_call_us: float | None, what: str) -> list[Evidence]:
    """Per-call cost from CPU time (replayed) next to the trace's wall time per call: their
    ratio is what a busy host (and the profiler) inflates."""
    items = [Evidence(f"CPU time per {what} call (replayed)", replayed.call_us, "µs", SOURCE)]
    if wall_call_us and replayed.call_us > 0:
        items += [
            Evidence(f"wall time per {what} call (trace)", wall_call_us, "µs", "trace"),
            Evidence(
                "wall over CPU time per call (host contention, profiler)",
                wall_call_us / replayed.call_us,
                "x",
                "trace/replay",
            ),
        ]
    return items
