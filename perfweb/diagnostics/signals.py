"""A verified or refuted fix re-ranks the run's findings (measured gain beats estimate)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import receiver

from perfweb.diagnostics.services import diagnosis_enqueue
from perfweb.jobs.signals import fix_verification_changed


@receiver(fix_verification_changed, dispatch_uid="diagnostics-rerank")
def _rerank_on_verification(sender: Any, *, run: Any, **kwargs: Any) -> None:
    run_pk = run.pk
    transaction.on_commit(lambda: diagnosis_enqueue(run_pk=run_pk))
