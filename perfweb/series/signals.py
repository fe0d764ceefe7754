"""A run that ended has its last small chunks packed now, not at the next beat tick."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import receiver

from perfweb.runs.signals import run_ended
from perfweb.series.tasks import compact_run_task


@receiver(run_ended, dispatch_uid="series-compact-ended-run")
def _compact_ended_run(sender: Any, *, run_pk: int, **kwargs: Any) -> None:
    transaction.on_commit(lambda: compact_run_task.delay(run_pk))
