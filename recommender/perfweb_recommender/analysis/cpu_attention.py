"""Hand-written attention in the CPU operators of a trace: softmax between two batched matmuls.

`q @ k.transpose(-2, -1)` and `attn @ v` on 3-D/4-D tensors dispatch to `aten::bmm`; the
softmax between them to `aten::softmax`. Taken in time order (outermost calls only, so the
`aten::_softmax` inside a softmax counts once), each bmm -> softmax -> bmm triple is one
attention computed by hand. Their CPU time (forward, and the backward's bmm and softmax
gradient), as the union of their intervals inside the profiled steps, is the share of the
steps a fused `scaled_dot_product_attention` could speed up. On a GPU trace the kernels tell
the same (`tensor_core_stats`' softmax_bmm_share); this reads the host side, which is all a
CPU run has.
"""

from __future__ import annotations

import numpy as np

from perfweb_recommender.analysis.intervals import merge
from perfweb_recommender.trace.model import CPU_OP, RankTrace

MATMULS = ("aten::bmm", "aten::baddbmm")
SOFTMAXES = ("aten::softmax", "aten::_softmax", "aten::_safe_softmax")
BACKWARD = ("aten::_softmax_backward_data",)


def cpu_attention(trace: RankTrace) -> dict[str, float]:
    """`patterns` (bmm -> softmax -> bmm triples per profiled step), `us` (their CPU time
    per step, µs) and `share` (of the profiled steps' time); empty without steps or ops."""
    cpu = trace.cpu
    if not trace.steps or not len(cpu):
        return {}
    names = np.array(trace.cpu_names + [""], dtype=object)
    kinds = {
        name: kind for kind, group in enumerate((MATMULS, SOFTMAXES, BACKWARD)) for name in group
    }
    code = np.array([kinds.get(n, -1) for n in names], dtype=np.int8)[cpu.name_id]
    first, last, steps_us = step_span(trace)
    chosen = np.flatnonzero(
        (cpu.cpu_class == CPU_OP) & (code >= 0) & (cpu.ts >= first) & (cpu.ts < last)
    )
    if chosen.size == 0:
        return {}
    chosen = chosen[np.argsort(cpu.ts[chosen], kind="stable")]
    starts, ends = cpu.ts[chosen], cpu.ts[chosen] + cpu.dur[chosen]
    outermost = np.ones(chosen.size, dtype=bool)
    outermost[1:] = starts[1:] >= np.maximum.accumulate(ends)[:-1]
    sequence = code[chosen][outermost]
    patterns = (
        int(np.sum((sequence[:-2] == 0) & (sequence[1:-1] == 1) & (sequence[2:] == 0)))
        if sequence.size >= 3
        else 0
    )
    merged_starts, merged_ends = merge(starts, ends)
    busy_us = float(np.sum(merged_ends - merged_starts))
    count = len(trace.steps)
    return {
        "patterns": round(patterns / count, 2),
        "us": round(busy_us / count, 3),
        "share": round(busy_us / steps_us, 4) if steps_us > 0 else 0.0,
    }


def step_span(trace: RankTrace) -> tuple[float, float, float]:
    """(first start, last end, summed duration) of the profiled steps, each clipped to the
    span of the trace's CPU events (a step inferred from the window's first optimizer step
    can start long before anything was recorded)."""
    cpu = trace.cpu
    lo, hi = float(cpu.ts.min()), float((cpu.ts + cpu.dur).max())
    spans = [(max(s.ts, lo), min(s.ts + s.dur, hi)) for s in trace.steps]
    spans = [(a, b) for a, b in spans if b > a]
    if not spans:
        return lo, lo, 0.0
    return spans[0][0], max(b for _, b in spans), sum(b - a for a, b in spans)
