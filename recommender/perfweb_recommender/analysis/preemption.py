"""A busy host's waits taken out of a trace's operator times.

On a shared host the loop's thread is preempted for milliseconds at a time (a neighbour's
time slice), inside an operator as often as between two, and a profiler window is a few
steps. One such wait, or an operator's one-off first call (a oneDNN primitive built), swells
that operator and shrinks every other one's share of the span: a 12 µs ReLU measured 440 µs
beside two busy processes, and an MLP's share of time in nn.Linear read 0.70 instead of 0.86.
A call is what it costs, so each is capped at CALL_CAP times the fastest like call (the
same operator on the same shapes, or at the same place in every request); each gap between
two top-level operators at GAP_CAP times the median gap. The replay plan and the module
times both read a trace through these two caps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

CALL_CAP = 4.0  # a call beyond this many times its fastest like call waited (a preemption)
GAP_CAP = 4.0  # a gap between operators beyond this many median gaps is a preemption
MIN_GAP_CAP_US = 1.0  # never cap a gap below this (a window of back-to-back operators)


def capped_calls(durations: Sequence[float], keys: Sequence[Hashable | None]) -> list[float]:
    """Each duration capped at CALL_CAP times the fastest duration of the same key; a call
    whose key is None, or whose key no other call shares, is kept as it is."""
    alike: dict[Hashable, list[float]] = defaultdict(list)
    for key, duration in zip(keys, durations, strict=True):
        if key is not None:
            alike[key].append(duration)
    caps = {key: CALL_CAP * min(d) for key, d in alike.items() if len(d) > 1}
    return [
        min(duration, caps.get(key, float("inf"))) if key is not None else duration
        for key, duration in zip(keys, durations, strict=True)
    ]


def capped_gaps(gaps: Sequence[float]) -> list[float]:
    """The gaps (µs, negatives as 0), each capped at GAP_CAP times their median."""
    clean = [max(0.0, gap) for gap in gaps]
    if not clean:
        return []
    cap = max(MIN_GAP_CAP_US, GAP_CAP * sorted(clean)[len(clean) // 2])
    return [min(gap, cap) for gap in clean]
