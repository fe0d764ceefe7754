"""The runs list's rows and the run page's detail: a run's own row with a summary of its
samples (mean GPU utilisation, each series' span). Reads only, always of runs already scoped
by perfweb.runs.selectors.run_queryset.

They live here, not in perfweb.runs, because they read the series' tables: series depends on
runs (a series belongs to a run), never the other way round.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q, QuerySet

from perfweb.runs.models import Run
from perfweb.runs.selectors import DEFAULT_LIMIT, MAX_LIMIT, run_queryset, run_summary
from perfweb.series.selectors import series_means, series_span


def run_list(
    *, runs: QuerySet[Run], status: str | None = None, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    """Newest first, as the read API's `runs`."""
    if status:
        runs = runs.filter(status=status)
    rows = list(
        runs.select_related("project")
        .annotate(gpu_count=Count("devices", filter=Q(devices__kind="gpu")))
        .order_by("-started_at", "-id")[: max(1, min(limit, MAX_LIMIT))]
    )
    means = series_means(run_ids=[run.id for run in rows], name="gpu.utilization")
    return [run_summary(run=run, mean_gpu_utilization=means.get(run.id)) for run in rows]


def run_list_for_user(
    *, user: AbstractBaseUser | AnonymousUser, status: str | None = None, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    return run_list(runs=run_queryset(user=user), status=status, limit=limit)


def run_detail(*, run: Run) -> dict[str, Any]:
    """The run as in the list, plus facts, tags, processes, devices and its series."""
    mean = series_means(run_ids=[run.id], name="gpu.utilization").get(run.id)
    processes = list(
        run.processes.order_by("rank", "started_at").values(
            "agent_id",
            "role",
            "rank",
            "local_rank",
            "world_size",
            "pid",
            "host",
            "step_count",
            "dropped",
            "produced",
            "started_at",
            "last_seen_at",
            "ended_at",
            "exit_code",
        )
    )
    devices = run.devices.order_by("key").values(
        "key", "kind", "index", "name", "uuid", "memory_total", "power_limit", "extra"
    )
    return {
        **run_summary(run=run, mean_gpu_utilization=mean),
        "facts": run.facts,
        "tags": run.tags,
        "dropped": sum(p["dropped"] for p in processes),
        "processes": [_timestamps(p) for p in processes],
        "devices": list(devices),
        "series": series_span(run=run),
    }


def _timestamps(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.timestamp() if hasattr(v, "timestamp") else v) for k, v in row.items()}
