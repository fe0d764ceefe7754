"""A deleted trace row (its run deleted) takes its file with it."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from perfweb.diagnostics import conf
from perfweb.diagnostics.models import Trace


@receiver(post_delete, sender=Trace, dispatch_uid="diagnostics-trace-file")
def _remove_trace_file(sender: Any, *, instance: Trace, **kwargs: Any) -> None:
    path = conf.trace_dir() / instance.path
    transaction.on_commit(lambda: path.unlink(missing_ok=True))
