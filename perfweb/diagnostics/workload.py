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

from django.db.models import Count, Max, Min, QuerySet

from perfweb.diagnostics.evidence import STEP_POINTS, stored_steps
from perfweb.diagnostics.models import Trace
from perfweb.runs.models import Run, RunProcess
from perfweb.series.models import Chunk
from perfweb.series.selectors import series_read, series_span, series_spans
from perfweb_contract import protocol
from perfweb_contract.protocol import STEP_DURATION
from perfweb_recommender.coverage import VERDICT_LABELS, Coverage, run_coverage
from perfweb_recommender.evidence import RunEvidence, Series, training_step_count
from perfweb_recommender.inference import (
    BATCH_SIZE,
    RequestStats,
    profiled_steps,
    request_stats,
    served_after_training,
)
from perfweb_recommender.run_end import end_unsent, ended_early, worker_name

SERVED_POINTS = 10_000  # the agent holds at most this many calls after training a rank
JOB_DEVICES = r"^(process|workers)(:\d+)?$"  # the job's own processes (DeviceNaming)
Worker = tuple[int | None, Any, Any]  # a worker process's rank, ended_at and unsent_at


def run_workload_coverage(*, run: Run, spans: list[dict[str, Any]] | None = None) -> Coverage:
    """The coverage of a stored run: its steps/requests, traces, GPU, process, host samples."""
    spans = series_span(run=run) if spans is None else spans
    workers = list(
        RunProcess.objects.filter(run=run)
        .exclude(role=protocol.ROLE_LAUNCHER)
        .values_list("rank", "ended_at", "unsent_at")
    )
    return _coverage(run, spans, Trace.objects.filter(run=run).count(), workers)


def runs_workload_coverage(*, runs: list[Run]) -> dict[int, Coverage]:
    """`run_workload_coverage` of many runs (by primary key) in three queries, for the pages
    that summarise runs (the fleet page, the runs list): the same verdict as each run's page."""
    ids = [run.id for run in runs]
    spans = series_spans(run_ids=ids)
    traces = dict(
        Trace.objects.filter(run_id__in=ids)
        .values("run_id")
        .annotate(n=Count("id"))
        .values_list("run_id", "n")
    )
    workers: dict[int, list[Worker]] = {run_id: [] for run_id in ids}
    processes = RunProcess.objects.filter(run_id__in=ids).exclude(role=protocol.ROLE_LAUNCHER)
    for run_id, *worker in processes.values_list("run_id", "rank", "ended_at", "unsent_at"):
        workers[run_id].append((worker[0], worker[1], worker[2]))
    return {
        run.id: _coverage(run, spans[run.id], traces.get(run.id, 0), workers[run.id])
        for run in runs
    }


def coverage_summary(coverage: Coverage) -> dict[str, Any]:
    """What a page that summarises runs shows of one run's coverage (the runs list, the fleet
    page, their APIs): the run page's verdict, its headline and fix when not observed, and
    what one step is called (`request` for inference)."""
    return {
        "verdict": coverage.verdict,
        "label": VERDICT_LABELS[coverage.verdict],
        "headline": coverage.headline,
        "fix": coverage.fix,
        "kind": coverage.kind,
        "unit": coverage.unit,
    }


def run_rows_with_coverage(
    *, rows: list[dict[str, Any]], runs: QuerySet[Run]
) -> list[dict[str, Any]]:
    """The runs list's rows (`run_summary` dicts), each with its `coverage_summary`."""
    found = list(runs.filter(run_id__in=[row["id"] for row in rows]))
    coverage = runs_workload_coverage(runs=found)
    by_run_id = {run.run_id: coverage_summary(coverage[run.id]) for run in found}
    return [{**row, "coverage": by_run_id.get(row["id"])} for row in rows]


def _coverage(
    run: Run, spans: list[dict[str, Any]], traces: int, workers: list[Worker]
) -> Coverage:
    def samples(test: Callable[[dict[str, Any]], bool]) -> int:
        return int(sum(s["count"] or 0 for s in spans if test(s)))

    step_devices = {s["device"] for s in spans if s["name"] == STEP_DURATION and s["count"]}
    # each rank's calls before its first optimizer step (an eval at iteration 0) are no steps
    counts = [
        training_step_count(counted=int(s["count"] or 0), facts=run.facts or {})
        for s in spans
        if s["name"] == STEP_DURATION
    ]
    return run_coverage(
        facts=run.facts or {},
        steps=sum(steps for steps, _ in counts),
        pre_training_calls=sum(before for _, before in counts),
        ranks=len(step_devices),
        traces=traces,
        gpu_samples=samples(lambda s: s["name"].startswith("gpu.")),
        process_samples=samples(lambda s: s["name"].startswith("process.")),
        host_samples=samples(lambda s: s["device"] == "host"),
        lost=_lost_ends(run, workers),
        exit_code=run.exit_code if run.status in (Run.FINISHED, Run.FAILED) else None,
        error=str((run.facts or {}).get("run.error") or ""),
    )


def _lost_ends(run: Run, workers: list[Worker]) -> list[str]:
    """What the end of a run its launcher finished lost: the workers whose agent never sent
    its final data (killed before it could flush), with the run's exit status, and those
    whose agent said its final data waits on the host (not sent yet)."""
    if run.status not in (Run.FINISHED, Run.FAILED):
        return []
    silent = [(worker_name(r, workers=len(workers)), u) for r, e, u in workers if e is None]
    return ended_early(
        exit_code=run.exit_code, silent=[who for who, unsent in silent if unsent is None]
    ) + end_unsent(waiting=[who for who, unsent in silent if unsent is not None])


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
    constant = _constant_batch_size(run)
    if constant is not None:  # every request had this size: the sum is exact without a read
        sizes = [(r.t, constant) for r in requests]
    for series in series_read(run=run, names=[BATCH_SIZE], start=start, points=STEP_POINTS):
        if constant is not None:
            break
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


def run_served_stats(*, run: Run) -> RequestStats | None:
    """A run that trained, then served: the statistics of the model's calls after its last
    optimizer step (the agent's `request.*` series, sent at exit, at most SERVED_POINTS a
    rank, read raw), None when there were none."""
    read = series_read(
        run=run,
        names=[protocol.REQUEST_DURATION, protocol.REQUEST_BATCH_SIZE],
        points=SERVED_POINTS,
    )
    series = [
        Series(device=s.device, name=s.name, t=s.t.tolist(), v=s.v.tolist())
        for s in read
        if not s.downsampled  # a downsampled latency is no request's latency
    ]
    stats = served_after_training(RunEvidence(series=series)) if series else None
    if stats is not None:
        stats.peak_rss_bytes = _peak(run=run, name="process.rss", job_only=True)
    return stats


def _constant_batch_size(run: Run) -> float | None:
    """The one batch size of every request of the run, when its chunks' exact minimum and
    maximum agree (most services send one size); None when sizes vary or none was recorded."""
    sizes = Chunk.objects.filter(series__run=run, series__name=BATCH_SIZE).aggregate(
        low=Min("v_min"), high=Max("v_max")
    )
    if sizes["low"] is None or sizes["low"] != sizes["high"]:
        return None
    return float(sizes["low"])


def _peak(*, run: Run, name: str, job_only: bool = False) -> float | None:
    """The largest sample of a series over the whole run (chunk maxima: exact, cheap)."""
    chunks = Chunk.objects.filter(series__run=run, series__name=name)
    if job_only:
        chunks = chunks.filter(series__device__regex=JOB_DEVICES)
    peak = chunks.aggregate(peak=Max("v_max"))["peak"]
    return float(peak) if peak is not None else None


def run_workload_json(*, run: Run) -> dict[str, Any]:
    """`GET /api/v1/runs/<run_id>/workload`: the coverage, and the requests of an inference
    run (`requests` is null for a training run or one with no request yet), and a training
    run's requests after its last optimizer step (`served`, null without any)."""
    spans = series_span(run=run)
    coverage = run_workload_coverage(run=run, spans=spans)
    requests: dict[str, Any] | None = None
    served: dict[str, Any] | None = None
    if coverage.kind == "inference":
        stats, total = run_request_stats(run=run, spans=spans)
        if stats is not None:
            requests = {
                **stats.as_json(),
                "requests_total": total,
                "window_requests": stats.requests,
            }
    elif coverage.served_after_training:
        found = run_served_stats(run=run)
        served = found.as_json(windows=False) if found is not None else None
    return {
        "run": run.run_id,
        "kind": coverage.kind,
        "coverage": coverage.as_json(),
        "requests": requests,
        "served": served,  # a training run's requests after its last optimizer step
    }
