"""A diagnosis claim kept alive while the worker that holds it is alive.

The claim (`RunDiagnosis.claimed_until`) is short (PERFWEB_DIAGNOSE_CLAIM_TTL, 60 s) and a
thread of the diagnosing worker renews it every third of that. A worker killed mid-diagnosis
(SIGKILL, OOM, a lost machine) stops renewing, its claim runs out within the TTL, and beat's
diagnosis sweep hands the run to a live worker; the broker's redelivery of the killed task
(after its visibility timeout) then finds nothing left to do.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

from django.db import connections
from django.utils import timezone

from perfweb.diagnostics.models import RunDiagnosis

log = logging.getLogger(__name__)


@contextlib.contextmanager
def claim_kept(*, state: RunDiagnosis, ttl: Callable[[], timedelta]) -> Iterator[None]:
    """Renew `state`'s claim every third of `ttl()` while the block runs.

    A renewal is conditional on the claim still being this one (same `started_at`), so a
    worker that stalled past its claim never takes it back from the next one.
    """
    stop = threading.Event()

    def renew() -> None:
        try:
            while not stop.wait(ttl().total_seconds() / 3):
                RunDiagnosis.objects.filter(id=state.id, started_at=state.started_at).update(
                    claimed_until=timezone.now() + ttl()
                )
        except Exception:  # a failed renewal only lets the claim run out
            log.exception("renewing the diagnosis claim of run %s failed", state.run_id)
        finally:
            connections.close_all()  # this thread's own connections only

    keeper = threading.Thread(target=renew, name=f"diagnosis-claim-{state.id}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()  # not joined: a renewal waiting on a row lock must not hold up the task
