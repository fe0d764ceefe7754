"""Sending one delivery: claim it, call its channel's `send()`, log the attempt, sort the outcome.

A delivery is claimed with a conditional UPDATE that only succeeds while it is neither done
nor stopped and nobody holds a live claim; so a task that runs twice sends once, and a claim
left by a killed worker expires (PERFWEB_ALERT_CLAIM_SECONDS) and the beat sweep retries it.
Transient failures come back after a growing delay; permanent ones stop and are shown on the
channel.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from perfweb.alerts import conf
from perfweb.alerts.channels import CHANNELS, PermanentError, TransientError
from perfweb.alerts.models import Channel, Delivery, DeliveryAttempt

BACKOFF_S = (5, 30, 120, 600, 1800)  # after the 1st, 2nd, … transient failure
MAX_ATTEMPTS = len(BACKOFF_S) + 1
Enqueue = Callable[[int, float], None]  # (delivery id, countdown seconds)


@transaction.atomic
def delivery_claim(*, delivery_id: int, now: datetime) -> DeliveryAttempt | None:
    """Takes the delivery, or returns None if it is done, stopped, not due or held. The
    attempt is logged as started before anything is sent; an attempt still "started" when
    the next claim comes belonged to a worker that died, and is marked interrupted."""
    expired = now - timedelta(seconds=conf.claim_seconds())
    claimable = Q(claimed_at=None) | Q(claimed_at__lt=expired)
    claimed = Delivery.objects.filter(
        claimable, id=delivery_id, delivered_at=None, failed_at=None, due_at__lte=now
    ).update(claimed_at=now, attempts=F("attempts") + 1)
    if claimed != 1:
        return None
    DeliveryAttempt.objects.filter(delivery_id=delivery_id, outcome=DeliveryAttempt.STARTED).update(
        outcome=DeliveryAttempt.INTERRUPTED, detail="the worker stopped mid-attempt"
    )
    delivery = Delivery.objects.select_related("channel").get(id=delivery_id)
    return DeliveryAttempt.objects.create(
        delivery=delivery, channel=delivery.channel, at=now, outcome=DeliveryAttempt.STARTED
    )


def delivery_send(*, delivery_id: int, enqueue: Enqueue | None = None) -> str | None:
    """Sends the delivery if this caller wins the claim; returns the attempt's outcome, or
    None when there was nothing to do (done, stopped, not due, or claimed by another)."""
    attempt = delivery_claim(delivery_id=delivery_id, now=timezone.now())
    if attempt is None:
        return None
    delivery = attempt.delivery
    channel = delivery.channel
    started = time.monotonic()
    retry_after: float | None = None
    try:
        detail = CHANNELS[channel.kind].send(config=channel.config, message=delivery.payload)
        outcome = DeliveryAttempt.OK
    except TransientError as error:
        outcome, detail, retry_after = DeliveryAttempt.TRANSIENT, str(error), error.retry_after
    except PermanentError as error:
        outcome, detail = DeliveryAttempt.PERMANENT, str(error)
    except Exception as error:  # a bug in a channel must not lose the message: retry it
        outcome, detail = DeliveryAttempt.TRANSIENT, f"{type(error).__name__}: {error}"
    took_ms = int(1000 * (time.monotonic() - started))
    _record(
        attempt=attempt,
        outcome=outcome,
        detail=str(detail)[:500],
        took_ms=took_ms,
        retry_after=retry_after,
        enqueue=enqueue,
    )
    return outcome


@transaction.atomic
def _record(
    *,
    attempt: DeliveryAttempt,
    outcome: str,
    detail: str,
    took_ms: int,
    retry_after: float | None,
    enqueue: Enqueue | None,
) -> None:
    now = timezone.now()
    delivery = attempt.delivery
    DeliveryAttempt.objects.filter(id=attempt.id).update(
        outcome=outcome, detail=detail, duration_ms=took_ms
    )
    rows = Delivery.objects.filter(id=delivery.id)
    if outcome == DeliveryAttempt.OK:
        rows.update(delivered_at=now, last_error="")
        Channel.objects.filter(id=delivery.channel_id).exclude(last_error="").update(
            last_error="", last_error_at=None
        )
        return
    if outcome == DeliveryAttempt.TRANSIENT and delivery.attempts < MAX_ATTEMPTS:
        delay = max(BACKOFF_S[delivery.attempts - 1], retry_after or 0.0)
        rows.update(claimed_at=None, due_at=now + timedelta(seconds=delay), last_error=detail)
        if enqueue is not None:
            transaction.on_commit(lambda: enqueue(delivery.id, delay))
        return
    if outcome == DeliveryAttempt.TRANSIENT:
        detail = f"gave up after {delivery.attempts} attempts: {detail}"[:500]
    rows.update(failed_at=now, last_error=detail)
    Channel.objects.filter(id=delivery.channel_id).update(last_error=detail, last_error_at=now)
