from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from perfweb.runs.models import Run
from perfweb.series.services import run_compact

RECENT = timedelta(hours=1)


@shared_task(acks_late=True, ignore_result=True)
def compact_run_task(run_pk: int) -> int:
    """Merges a run's small chunks; safe to run twice or concurrently (see series_compact)."""
    return run_compact(run_id=run_pk)


@shared_task(acks_late=True, ignore_result=True)
def compact_recent_runs_task() -> int:
    """Beat: one compaction task per run that reported within the last hour (ended runs
    included), so that many runs spread over the workers and none hits the time limit."""
    recent = Run.objects.filter(last_seen_at__gte=timezone.now() - RECENT)
    run_pks = list(recent.values_list("id", flat=True))
    for pk in run_pks:
        compact_run_task.delay(pk)
    return len(run_pks)
