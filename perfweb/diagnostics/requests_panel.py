"""The requests panel of an inference run's page (registered with perfweb.dashboard.panels):
latency percentiles and throughput, instead of a step-time chart that would pretend the run
is training."""

from __future__ import annotations

from typing import Any

from perfweb.dashboard.panels import Panel
from perfweb.diagnostics.formatting import format_value
from perfweb.diagnostics.workload import run_request_stats
from perfweb.runs.models import Run
from perfweb_contract.api import RUN_WORKLOAD_PATH
from perfweb_recommender.coverage import workload_kind


def requests_panel(*, run: Run, user: Any) -> Panel | None:
    """Only for a run the agent labelled inference (the dashboard has already scoped `run`)."""
    if workload_kind(facts=run.facts or {}, steps=run.step_count) != "inference":
        return None
    stats, total = run_request_stats(run=run)
    numbers: list[tuple[str, str]] = []
    if stats is not None:
        numbers = [
            ("Requests", f"{total:,}"),
            ("Latency p50", format_value(stats.latency_p50_s, "s")),
            ("p95", format_value(stats.latency_p95_s, "s")),
            ("p99", format_value(stats.latency_p99_s, "s")),
            ("Left out (profiled)", f"{stats.profiled_requests:,}"),
            ("Throughput", _rate(stats.throughput_rps, "requests/s")),
            ("Samples/s", _rate(stats.throughput_sps, "samples/s")),
            ("Peak RSS", _bytes(stats.peak_rss_bytes)),
        ]
        if stats.peak_cuda_allocated_bytes is not None:
            numbers.append(("Peak CUDA allocated", _bytes(stats.peak_cuda_allocated_bytes)))
    return Panel(
        template="diagnostics/_requests.html",
        context={
            "api": RUN_WORKLOAD_PATH.format(run_id=run.run_id),
            "live": run.status == Run.RUNNING,
            "numbers": numbers,
            "partial": stats is not None and stats.requests < total,
            "window_requests": stats.requests if stats else 0,
        },
    )


def _rate(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:,.1f} {unit}"


def _bytes(value: float | None) -> str:
    return "—" if value is None else format_value(value, "bytes")
