"""HTA's microsecond rounding, to explain differences on nanosecond traces.

HTA 0.5.0 parses timestamps into float64 absolute microseconds (about 0.25 µs apart at
today's epoch), then rounds to whole microseconds: start = ceil(ts), end = floor(ts + dur),
dur = end - start (negative for sub-microsecond kernels). That shrinks
every GPU event by up to 2 µs, which inflates idle time on traces of short kernels. We never
analyse rounded data; this exists so tests (and the benchmark) can show that HTA's number is
what our exact analysis gives once the same rounding is applied.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from perfweb_recommender.trace.model import RankTrace


def hta_rounded(trace: RankTrace) -> RankTrace:
    """A copy of `trace` with HTA's whole-microsecond rounding applied (absolute times)."""
    if not trace.fractional_timestamps:
        return trace
    base, origin = np.float64(trace.base_us), trace.origin_us

    def rounded(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        absolute = base + (origin + ts)  # what a float64 parser makes of the absolute time
        start = np.ceil(absolute)
        end = np.floor(absolute + dur)
        return (start - base) - origin, end - start

    gpu_start, gpu_dur = rounded(trace.gpu.ts, trace.gpu.dur)
    host_start, host_dur = rounded(trace.host.ts, trace.host.dur)
    steps = [
        dataclasses.replace(s, ts=float(rounded(np.array([s.ts]), np.zeros(1))[0][0]))
        for s in trace.steps
    ]
    return dataclasses.replace(
        trace,
        gpu=dataclasses.replace(trace.gpu, ts=gpu_start, dur=gpu_dur),
        host=dataclasses.replace(trace.host, ts=host_start, dur=host_dur),
        steps=steps,
    )
