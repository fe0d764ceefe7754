"""A run's workload as stored: what the agent saw of it (perfweb_recommender.coverage) and, for an
inference run, its request statistics (perfweb_recommender.inference). Reads only.

Counts come from the series' chunk summaries (exact, nothing decoded). Latency percentiles
need raw requests, so they are computed over the latest window that holds at most
`evidence.STEP_POINTS` requests per rank — the whole run unless it is very long, and the
JSON says which (`window_requests` of `requests_total`). Samples/s are summed from raw
`step.batch_size` points only: a downsampled read would not add up, so it gives none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Max

from perfweb.diagnostics.evidence import STEP_POINTS, stored_steps
from perfweb.diagnostics.models import Trace
from perfweb.runs.models import Run, RunProcess
from perfweb.series.models import Chunk
from perfweb.series.selectors import series_read, series_span
from perfweb_contract import protocol
from perfweb_contract.protocol import STEP_DURATION
from perfweb_recommender.coverage import Coverage, ended_early, run_coverage, worker_name
from perfweb_recommender.inference import BATCH_SIZE, RequestStats, profiled_steps, request_stats

JOB_DEVICES = r"^(process|workers)(:\d+)?$"  # the job's own processes (DeviceNaming)


def run_workload_coverage(*, run: Run, spans: list[dict[str, Any]] | None = None) -> Coverage:
    """The coverage of a stored run: its steps/requests, traces, GPU, process, host samples."""
    spans = series_span(run=run) if spans is None else spans

    def samples(test: Callable[[dict[str, Any]], bool]) -> int:
        return int(sum(s["count"] or 0 for s in spans if test(s)))

    step_devices = {s["device"] for s in spans if s["name"] == STEP_DURATION and s["count"]}
    return run_coverage(
        facts=run.facts or {},
        steps=samples(lambda s: s["name"] == STEP_DURATION),
        ranks=len(step_devices),
        traces=Trace.objects.filter(run=run).count(),
        gpu_samples=samples(lambda s: s["name"].startswith("gpu.")),
        process_samples=samples(lambda s: s["name"].startswith("process.")),
        host_samples=samples(lambda s: s["device"] == "host"),
        lost=_lost_ends(run),
    )


def _lost_ends(run: Run) -> list[str]:
    """What the end of a run its launcher finished lost: the workers whose agent never sent
    its final data (killed before it could flush), with the run's exit status."""
    if run.status not in (Run.FINISHED, Run.FAILED):
        return []
    workers = list(
        RunProcess.objects.filter(run=run).exclude(role=protocol.ROLE_LAUNCHER)
        .values_list("rank", "ended_at")
    )  # fmt: skip
    silent = [worker_name(rank, workers=len(workers)) for rank, ended in workers if ended is None]
    return ended_early(exit_code=run.exit_code, silent=silent)


def run_request_stats(
    *, run: Run, spans: list[dict[str, Any]] | None = None
) -> tuple[RequestStats | None, int]:
    """The run's request statistics over its latest raw window, and how many requests the
    whole run has (the window holds them all unless the run is very long)."""
    spans = series_span(run=run) if spans is None else spans
    total = int(sum(s["count"] or 0 for s in spans if s["name"] == STEP_DURATION))
    requests = stored_steps(run=run, spans=spans)
    if not requests:
        return None, total
    start = min(r.t for r in requests)
    sizes: list[tuple[float, float]] = []
    for series in series_read(run=run, names=[BATCH_SIZE], start=start, points=STEP_POINTS):
        if series.downsampled:  # sums of downsampled points are wrong: say nothing instead
            sizes = []
            break
        sizes += zip(series.t.tolist(), series.v.tolist(), strict=True)
    stats = request_stats(
        requests=requests,
        batch_sizes=sizes,
        peak_rss_bytes=_peak(run=run, name="process.rss", job_only=True),
        peak_cuda_allocated_bytes=_peak(run=run, name="torch.cuda_peak")
        or _peak(run=run, name="torch.cuda_allocated"),
        profiled=profiled_steps(Trace.objects.filter(run=run).values_list("name", flat=True)),
    )
    return stats, total


def _peak(*, run: Run, name: str, job_only: bool = False) -> float | None:
    """The largest sample of a series over the whole run (chunk maxima: exact, cheap)."""
    chunks = Chunk.objects.filter(series__run=run, series__name=name)
    if job_only:
        chunks = chunks.filter(series__device__regex=JOB_DEVICES)
    peak = chunks.aggregate(peak=Max("v_max"))["peak"]
    return float(peak) if peak is not None else None


def run_workload_json(*, run: Run) -> dict[str, Any]:
    """`GET /api/v1/runs/<run_id>/workload`: the coverage, and the requests of an inference
    run (`requests` is null for a training run or one with no request yet)."""
    spans = series_span(run=run)
    coverage = run_workload_coverage(run=run, spans=spans)
    requests: dict[str, Any] | None = None
    if coverage.kind == "inference":
        stats, total = run_request_stats(run=run, spans=spans)
        if stats is not None:
            requests = {
                **stats.as_json(),
                "requests_total": total,
                "window_requests": stats.requests,
            }
    return {
        "run": run.run_id,
        "kind": coverage.kind,
        "coverage": coverage.as_json(),
        "requests": requests,
    }
