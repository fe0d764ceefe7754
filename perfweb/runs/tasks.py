from __future__ import annotations

from celery import shared_task
from django.conf import settings

from perfweb.runs.services import runs_mark_lost


@shared_task(acks_late=True, ignore_result=True)
def sweep_lost_runs_task() -> int:
    """Beat: runs whose agents went silent are lost."""
    return runs_mark_lost(silent_for=settings.PERFWEB_LOST_AFTER)
