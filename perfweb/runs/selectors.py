"""Reads of runs, always scoped: by the user's memberships or by a token's project.

`run_get_for_user(user=..., run_id=...)` gives a run or None (a run of another project is
None, i.e. a 404), `run_summary(run=...)` its row as the read API returns it. The rows that
carry a summary of the run's samples (the runs list, the run page's detail) are read in
perfweb.series.run_rows (series reads runs, never the other way round);
perfweb.series.selectors.series_read(...) gives the downsampled series.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from perfweb.projects.models import Project
from perfweb.runs.models import Run
from perfweb_contract import protocol
from perfweb_recommender.evidence import training_step_count

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
    # an evaluation at iteration 0 the agent counted before training began is no step
    steps, pre_training_calls = training_step_count(counted=run.step_count, facts=run.facts or {})
    return {
        "id": run.run_id,
        "name": run.name,
        "status": run.status,
        "steps": steps,
        "pre_training_calls": pre_training_calls,
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


def agent_commands(*, run: Run, agent_id: str) -> list[dict[str, Any]]:
    """Commands for an agent, sent back in every ingest reply (none yet: trace capture on
    demand will add `{"type": "capture_trace", ...}`)."""
    return []
