"""The safety net: deliveries that are due but unclaimed (lost message) or whose claim has
expired (killed worker) are handed to the broker again. Claiming still decides who sends."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from perfweb.alerts import conf, selectors


def deliveries_sweep(*, now: datetime, enqueue: Callable[[int, float], None]) -> list[int]:
    claimed_before = now - timedelta(seconds=conf.claim_seconds())
    due = selectors.deliveries_due(now=now, claimed_before=claimed_before)
    for delivery_id in due:
        enqueue(delivery_id, 0.0)
    return due
