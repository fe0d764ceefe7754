"""Reads of runs, always scoped: by the user's memberships or by a token's project.

For the dashboard: `run_list_for_user(user=...)` gives the rows of the runs list (the same
dicts the read API returns), `run_get_for_user(user=..., run_id=...)` a run or None (a run of
another project is None, i.e. a 404), `run_detail(run=...)` everything the run page needs,
and perfweb.series.selectors.series_read(...) the downsampled series.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, Q, QuerySet

from agent import protocol
from perfweb.projects.models import Project
from perfweb.runs.models import Run
from perfweb.series.selectors import series_means, series_span

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def run_queryset(
    *, user: AbstractBaseUser | AnonymousUser | None = None, project: Project | None = None
) -> QuerySet[Run]:
    """The runs a token's project or a logged-in user may see (nothing for anyone else)."""
    if project is not None:
        return Run.objects.filter(project=project)
    if user is not None and user.is_authenticated:
        return Run.objects.filter(project__memberships__user=user)
    return Run.objects.none()


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


def run_get(*, runs: QuerySet[Run], run_id: str) -> Run | None:
    """The run, or None; None without a query for what cannot be a run id (a URL's `%00`
    would make PostgreSQL raise)."""
    if not protocol.RUN_ID_RE.fullmatch(run_id):
        return None
    return runs.select_related("project").filter(run_id=run_id).first()


def run_get_for_user(*, user: AbstractBaseUser | AnonymousUser, run_id: str) -> Run | None:
    return run_get(runs=run_queryset(user=user), run_id=run_id)


def run_summary(*, run: Run, mean_gpu_utilization: float | None = None) -> dict[str, Any]:
    gpus = getattr(run, "gpu_count", None)
    if gpus is None:
        gpus = run.devices.filter(kind="gpu").count()
    end = run.ended_at or run.last_seen_at
    return {
        "id": run.run_id,
        "name": run.name,
        "status": run.status,
        "steps": run.step_count,
        "host": run.host,
        "command": run.command,
        "started_at": run.started_at.timestamp(),
        "ended_at": run.ended_at.timestamp() if run.ended_at else None,
        "exit_code": run.exit_code,
        "last_seen_at": run.last_seen_at.timestamp(),
        "duration_s": max(0.0, (end - run.started_at).total_seconds()),
        "gpus": gpus,
        "mean_gpu_utilization": mean_gpu_utilization,
        "project": run.project.name,
        "url": f"/runs/{run.run_id}/",
    }


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


def agent_commands(*, run: Run, agent_id: str) -> list[dict[str, Any]]:
    """Commands for an agent, sent back in every ingest reply (none yet: trace capture on
    demand will add `{"type": "capture_trace", ...}`)."""
    return []


def _timestamps(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.timestamp() if hasattr(v, "timestamp") else v) for k, v in row.items()}
