"""Storing a state change: the conditional move, the event row, its message and the outbox.

The move is `filter(id=…, state=<what we read>).update(…) == 1` (for a reminder, on the
`last_notified_at` we read): only one of two racing callers wins, and only the winner writes
the event and its deliveries, in the same transaction. The broker is rung after commit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from perfweb.alerts import conf
from perfweb.alerts.messages import VERSION
from perfweb.alerts.models import Alert, AlertEvent, Channel, Delivery
from perfweb.alerts.why import as_payload
from perfweb_recommender.conditions import CONDITIONS
from perfweb_recommender.rules.base import Finding

Enqueue = Callable[[int, float], None]


def event_store(
    *,
    alert: Alert,
    kind: str,
    to_state: str,
    summary: str,
    numbers: dict[str, Any],
    finding: Finding | None,
    now: datetime,
    enqueue: Enqueue | None = None,
) -> AlertEvent | None:
    """Moves the alert and stores the event with its deliveries, or returns None when another
    caller moved it first."""
    suppressed = bool(alert.snoozed_until and alert.snoozed_until > now)
    with transaction.atomic():
        why = finding.title if finding is not None else ""
        if not _move(
            alert=alert,
            kind=kind,
            to_state=to_state,
            summary=summary,
            why=why,
            now=now,
            suppressed=suppressed,
        ):
            return None
        payload = message_build(
            alert=alert,
            kind=kind,
            to_state=to_state,
            summary=summary,
            numbers=numbers,
            finding=finding,
            at=now,
        )
        event = AlertEvent.objects.create(
            alert=alert,
            kind=kind,
            from_state=alert.state,
            to_state=to_state,
            at=now,
            summary=summary[:500],
            payload=payload,
            suppressed=suppressed,
        )
        if not suppressed:
            deliveries_create(
                project_id=alert.rule.project_id, payload=payload, event=event, enqueue=enqueue
            )
    return event


def _move(
    *,
    alert: Alert,
    kind: str,
    to_state: str,
    summary: str,
    why: str,
    now: datetime,
    suppressed: bool,
) -> bool:
    notified = None if suppressed else now
    if kind == AlertEvent.REMINDER:
        rows = Alert.objects.filter(
            id=alert.id, state=Alert.FIRING, last_notified_at=alert.last_notified_at
        )
        return rows.update(last_notified_at=notified or alert.last_notified_at) == 1
    rows = Alert.objects.filter(id=alert.id, state=alert.state)
    changes: dict[str, Any] = {"state": to_state, "changed_at": now, "summary": summary[:500]}
    if to_state == Alert.FIRING:
        changes |= {
            "last_notified_at": notified,
            "acknowledged_at": None,
            "acknowledged_by": None,
            "why": why[:300],
        }
    return rows.update(**changes) == 1


def deliveries_create(
    *,
    project_id: int,
    payload: dict[str, Any],
    event: AlertEvent | None,
    enqueue: Enqueue | None,
    channels: list[Channel] | None = None,
) -> list[int]:
    """One delivery per enabled channel of the project; the broker is told after commit."""
    if channels is None:
        channels = list(Channel.objects.filter(project_id=project_id, enabled=True))
    now = timezone.now()
    rows = [
        Delivery(event=event, channel=channel, payload=payload, due_at=now) for channel in channels
    ]
    for row in rows:
        row.payload = {**payload, "id": str(row.key)}
    created = Delivery.objects.bulk_create(rows)
    ids = [row.id for row in created]
    if enqueue is not None and ids:
        transaction.on_commit(lambda: [enqueue(i, 0.0) for i in ids])
    return ids


def message_build(
    *,
    alert: Alert,
    kind: str,
    to_state: str,
    summary: str,
    numbers: dict[str, Any],
    finding: Finding | None,
    at: datetime,
) -> dict[str, Any]:
    """The webhook payload (docs/webhooks.md); every channel renders from it."""
    rule, run = alert.rule, alert.run
    project = rule.project
    base = conf.base_url()
    return {
        "version": VERSION,
        "id": "",  # the delivery's idempotency key, filled in per channel
        "event": kind,
        "state": to_state,
        "at": at.isoformat(),
        "summary": summary,
        "numbers": numbers,
        "why": as_payload(finding),
        "project": {"id": project.id, "name": project.name},
        "rule": {
            "id": rule.id,
            "kind": rule.kind,
            "threshold": rule.threshold,
            "window_minutes": rule.window_minutes,
            "scope_tag": rule.scope_tag,
            "fix_id": CONDITIONS[rule.kind].fix_id,
            "description": str(rule),
        },
        "alert": {
            "id": alert.id,
            "url": base + reverse("alerts:project", kwargs={"project_id": project.id}),
        },
        "run": {
            "id": run.run_id,
            "name": run.name or run.run_id,
            "host": run.host,
            "status": run.status,
            "tags": run.tags,
            "url": f"{base}/runs/{run.run_id}/",
        },
        "waste": _run_waste(run=run, kind=rule.kind, at=at),
    }


# The alerts about GPUs that do little carry the run's GPU-hours so far (the fleet page's).
WASTE_KINDS = frozenset({"low_utilization", "idle_memory_held"})


def _run_waste(*, run: Any, kind: str, at: datetime) -> dict[str, Any] | None:
    if kind not in WASTE_KINDS:
        return None
    from perfweb.fleet.selectors import run_waste_summary

    return run_waste_summary(run=run, at=at)
