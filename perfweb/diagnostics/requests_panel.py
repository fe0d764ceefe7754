"""The requests panel of an inference run's page (registered with perfweb.pages.panels):
latency percentiles and throughput, instead of a step-time chart that would pretend the run
is training."""

from __future__ import annotations

from typing import Any

from perfweb.diagnostics.formatting import format_value
from perfweb.diagnostics.workload import run_request_stats, run_served_stats
from perfweb.pages.panels import Panel
from perfweb.runs.models import Run
from perfweb_contract.api import RUN_WORKLOAD_PATH
from perfweb_contract.protocol import FACT_SERVED, FACT_SERVED_UNTIMED
from perfweb_recommender.coverage import workload_kind
from perfweb_recommender.inference import RequestStats


def requests_panel(*, run: Run, user: Any) -> Panel | None:
    """For a run the agent labelled inference (the dashboard has already scoped `run`), and
    for a training run that then served (its requests after the last optimizer step)."""
    if workload_kind(facts=run.facts or {}, steps=run.step_count) != "inference":
        return served_panel(run=run)
    stats, total = run_request_stats(run=run)
    numbers = _numbers(stats, total) if stats is not None else []
    return Panel(
        template="diagnostics/_requests.html",
        context={
            "api": RUN_WORKLOAD_PATH.format(run_id=run.run_id),
            "live": run.status == Run.RUNNING,
            "numbers": numbers,
            "partial": stats is not None and stats.requests < total,
            "window_requests": stats.requests if stats else 0,
            "window_text": f"{stats.requests:,}" if stats else "0",
            "total_text": f"{total:,}",
        },
    )


def served_panel(*, run: Run) -> Panel | None:
    """A training run's requests after its last optimizer step (a script that trained, then
    served); None when the agent timed none and could not see any."""
    facts = run.facts or {}
    untimed = facts.get(FACT_SERVED_UNTIMED) or 0
    stats = run_served_stats(run=run) if facts.get(FACT_SERVED) else None
    if stats is None and not untimed:
        return None
    return Panel(
        template="diagnostics/_served.html",
        context={
            "numbers": _numbers(stats, stats.requests) if stats is not None else [],
            "untimed": untimed,
        },
    )


def _numbers(stats: RequestStats, total: int) -> list[tuple[str, str]]:
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
    return numbers


def _rate(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:,.1f} {unit}"


def _bytes(value: float | None) -> str:
    return "—" if value is None else format_value(value, "bytes")
