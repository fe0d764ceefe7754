"""Collectives that run on the host (gloo): what a CPU-only distributed trace shows of them.

gloo runs each all-reduce on its own threads, annotated `gloo:all_reduce`; the training
thread only enqueues it (`c10d::allreduce_`) and, at the end of the backward, waits for it.
Much of an all-reduce's span overlaps the backward's own operators (DDP starts each bucket
as soon as its gradients are ready) or waits for a slower rank, and costs the step nothing.
What the step pays is the *exposed* part: all-reduce time during which no other operator of
the process runs — the training thread is waiting on it.
"""

from __future__ import annotations

import numpy as np

from perfweb_recommender.analysis.cpu_attention import step_span
from perfweb_recommender.analysis.intervals import merge, overlap_length
from perfweb_recommender.trace.model import CPU_ANNOTATION, CPU_OP, RankTrace

ALL_REDUCE_NAMES = ("gloo:all_reduce",)


def cpu_all_reduce(trace: RankTrace) -> dict[str, float]:
    """Per profiled step: `count` (all-reduce events), `us` (their union, µs), `exposed_us`
    (the part no other CPU operator overlaps); `share` and `exposed_share` of the profiled
    steps' time. Empty without steps or host all-reduces."""
    cpu = trace.cpu
    if not trace.steps or not len(cpu):
        return {}
    wanted = np.array([n in ALL_REDUCE_NAMES for n in trace.cpu_names] + [False], dtype=bool)
    first, last, steps_us = step_span(trace)
    inside = (cpu.ts >= first) & (cpu.ts < last)
    is_all_reduce = wanted[cpu.name_id]
    host_event = (cpu.cpu_class == CPU_OP) | (cpu.cpu_class == CPU_ANNOTATION)
    mask = host_event & is_all_reduce & inside
    if not mask.any():
        return {}
    ends = np.minimum(cpu.ts + cpu.dur, last)
    reducing = merge(cpu.ts[mask], ends[mask])
    others = (cpu.cpu_class == CPU_OP) & ~is_all_reduce & inside
    computing = merge(cpu.ts[others], ends[others])
    busy = float(np.sum(reducing[1] - reducing[0]))
    exposed = busy - overlap_length(reducing, computing)
    count = len(trace.steps)
    return {
        "count": round(int(mask.sum()) / count, 2),
        "us": round(busy / count, 3),
        "exposed_us": round(exposed / count, 3),
        "share": round(min(1.0, busy / steps_us), 4) if steps_us > 0 else 0.0,
        "exposed_share": round(min(1.0, exposed / steps_us), 4) if steps_us > 0 else 0.0,
    }
