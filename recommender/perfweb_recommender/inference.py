"""An inference run's request statistics: latency percentiles, throughput and peak memory.

For an inference run each of the agent's steps is one request or batch: its duration is the
request's latency and `step.batch_size` (a metric on the rank's device, at the step's end
time) the samples it carried. Pure: the CLI feeds it an offline directory's evidence, the
server the raw requests it read from its stored series.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfweb_contract import protocol
from perfweb_contract.protocol import WindowName
from perfweb_recommender.evidence import RunEvidence, StepSample

BATCH_SIZE = "step.batch_size"  # samples per request/batch (agent metric, rank device)
PERCENTILES = (50.0, 95.0, 99.0)
TARGET_WINDOWS = 30  # sliding windows across a run: each is span / TARGET_WINDOWS long
MAX_POINTS = 2 * TARGET_WINDOWS  # windows overlap by half: one point per half window
MIN_WINDOW_S = 1.0  # shorter windows hold too few requests for a p99


def profiled_steps(trace_names: Iterable[str]) -> dict[int, list[tuple[int, int]]]:
    """Per rank, the (first, last) step indices the agent's profiler windows spanned, from
    their traces' names. Those requests paid for the profiler (its opening, its segments'
    stops, its closing), so their latency is the profiler's as much as the workload's."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for name in trace_names:
        window = WindowName.parse(name)
        if window is not None:
            spans.setdefault(window.rank, []).append((window.first, window.last))
    return spans


def _profiled(request: StepSample, spans: Mapping[int, Sequence[tuple[int, int]]]) -> bool:
    return any(first <= request.index <= last for first, last in spans.get(request.rank, ()))


@dataclass
class RequestWindows:
    """Sliding-window series: each point is the window ending at `t` (Unix seconds)."""

    window_s: float
    t: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    p50_s: list[float] = field(default_factory=list)
    p95_s: list[float] = field(default_factory=list)
    p99_s: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    sps: list[float | None] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """JSON form (the read API's `requests.windows`)."""
        return {
            "window_s": self.window_s,
            "t": self.t,
            "requests": self.requests,
            "p50_s": self.p50_s,
            "p95_s": self.p95_s,
            "p99_s": self.p99_s,
            "rps": self.rps,
            "sps": self.sps,
        }


@dataclass
class RequestStats:
    """Latency, throughput and memory of one run's requests."""

    requests: int
    ranks: int
    span_s: float  # from the first request's start to the last one's end
    latency_p50_s: float
    latency_p95_s: float
    latency_p99_s: float
    throughput_rps: float | None
    throughput_sps: float | None  # None without `step.batch_size`
    samples: float | None
    peak_rss_bytes: float | None
    peak_cuda_allocated_bytes: float | None
    windows: RequestWindows
    profiled_requests: int = 0  # inside profiler windows: counted, left out of the latencies

    def as_json(self, *, windows: bool = True) -> dict[str, Any]:
        """JSON form; the CLI's `run.*` names (recommender/README.md)."""
        body: dict[str, Any] = {
            "requests": self.requests,
            "ranks": self.ranks,
            "span_s": self.span_s,
            "latency_p50_s": self.latency_p50_s,
            "latency_p95_s": self.latency_p95_s,
            "latency_p99_s": self.latency_p99_s,
            "throughput_rps": self.throughput_rps,
            "throughput_sps": self.throughput_sps,
            "samples": self.samples,
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_cuda_allocated_bytes": self.peak_cuda_allocated_bytes,
            "profiled_requests": self.profiled_requests,
        }
        if windows:
            body["windows"] = self.windows.as_json()
        return body


def request_stats(
    *,
    requests: Sequence[StepSample],
    batch_sizes: Sequence[tuple[float, float]] = (),
    peak_rss_bytes: float | None = None,
    peak_cuda_allocated_bytes: float | None = None,
    profiled: Mapping[int, Sequence[tuple[int, int]]] | None = None,
) -> RequestStats | None:
    """Statistics of these requests (every rank's together), None without any.

    `batch_sizes` are (t, samples) at the requests' end times. Throughput is requests (and
    samples) over the span from the first request's start to the last one's end. Requests
    inside `profiled` step spans (`profiled_steps`) count in the throughput but not in the
    latency percentiles, unless no other request is left.
    """
    if not requests:
        return None
    ordered = sorted(requests, key=lambda r: r.t)
    ends = np.array([r.t for r in ordered])
    inside = np.array([_profiled(r, profiled or {}) for r in ordered])
    if inside.all():
        inside[:] = False  # nothing but profiled requests: their latency is all there is
    latencies = np.where(inside, np.nan, [r.duration_s for r in ordered])
    start = float(min(r.t - r.duration_s for r in ordered))
    span = float(ends[-1]) - start
    p50, p95, p99 = (float(p) for p in np.nanpercentile(latencies, PERCENTILES))
    samples = float(sum(v for _, v in batch_sizes)) if batch_sizes else None
    return RequestStats(
        requests=len(ordered),
        ranks=len({r.rank for r in ordered}),
        span_s=span,
        latency_p50_s=p50,
        latency_p95_s=p95,
        latency_p99_s=p99,
        throughput_rps=len(ordered) / span if span > 0 else None,
        throughput_sps=samples / span if samples is not None and span > 0 else None,
        samples=samples,
        peak_rss_bytes=peak_rss_bytes,
        peak_cuda_allocated_bytes=peak_cuda_allocated_bytes,
        windows=sliding_windows(
            ends=ends, latencies=latencies, start=start, batch_sizes=batch_sizes
        ),
        profiled_requests=int(inside.sum()),
    )


def sliding_windows(
    *,
    ends: np.ndarray,
    latencies: np.ndarray,
    start: float,
    batch_sizes: Sequence[tuple[float, float]] = (),
) -> RequestWindows:
    """p50/p95/p99 latency and throughput over windows of span / TARGET_WINDOWS (at least
    MIN_WINDOW_S), one every half window; `ends` sorted; a NaN latency (a profiled request)
    counts in the throughput only. A window without requests is left out of the
    percentiles' lines (no latency to show) but counts 0 requests/s."""
    span = float(ends[-1]) - start
    window = max(MIN_WINDOW_S, span / TARGET_WINDOWS)
    stride = window / 2
    size_t = sorted(t for t, _ in batch_sizes)
    size_cum = np.cumsum([0.0] + [v for _, v in sorted(batch_sizes)])
    result = RequestWindows(window_s=window)
    end = start + min(window, span) if span > 0 else float(ends[-1])
    while True:
        begin = end - window
        low = bisect.bisect_right(ends, begin)
        high = bisect.bisect_right(ends, end)
        inside = latencies[low:high]
        measured = inside[~np.isnan(inside)]
        if len(measured):
            p50, p95, p99 = (float(p) for p in np.percentile(measured, PERCENTILES))
            result.t.append(end)
            result.requests.append(len(inside))
            result.p50_s.append(p50)
            result.p95_s.append(p95)
            result.p99_s.append(p99)
            length = min(window, end - start) or window
            result.rps.append(len(inside) / length)
            if size_t:
                total = size_cum[bisect.bisect_right(size_t, end)]
                total -= size_cum[bisect.bisect_right(size_t, begin)]
                result.sps.append(float(total) / length)
            else:
                result.sps.append(None)
        if end >= ends[-1] or len(result.t) >= 4 * MAX_POINTS:
            break
        end = min(end + stride, float(ends[-1]))
    return result


def evidence_request_stats(evidence: RunEvidence) -> RequestStats | None:
    """`request_stats` of an offline run's evidence: its steps are its requests."""
    rss = evidence.process_values("process.rss")
    cuda = evidence.values("torch.cuda_peak") or evidence.values("torch.cuda_allocated")
    return request_stats(
        requests=evidence.steps,
        batch_sizes=evidence.points(BATCH_SIZE),
        peak_rss_bytes=max(rss) if rss else None,
        peak_cuda_allocated_bytes=max(cuda) if cuda else None,
        profiled=profiled_steps(trace.source for trace in evidence.traces),
    )


def served_after_training(evidence: RunEvidence) -> RequestStats | None:
    """A script that trained, then served: the statistics of the model's calls after its
    last optimizer step (the agent's `request.duration` / `request.batch_size` series of
    each rank, each call's time in the model), None when the agent saw none."""
    requests = [
        StepSample(rank=_rank_of(device), index=i, t=t, duration_s=v)
        for device in evidence.devices_of(protocol.REQUEST_DURATION)
        for i, (t, v) in enumerate(evidence.points(protocol.REQUEST_DURATION, device))
    ]
    rss = evidence.process_values("process.rss")
    return request_stats(
        requests=requests,
        batch_sizes=evidence.points(protocol.REQUEST_BATCH_SIZE),
        peak_rss_bytes=max(rss) if rss else None,
    )


def _rank_of(device: str) -> int:
    """The rank of a `rank:N` device (0 for anything else)."""
    number = device.partition(":")[2]
    return int(number) if number.isdigit() else 0
