"""Writes for the alerts app: rules, channels, acknowledge, snooze, the "send test" button."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from perfweb.alerts.messages import VERSION
from perfweb.alerts.models import Alert, AlertRule, Channel
from perfweb.alerts.notify import deliveries_create
from perfweb.projects.models import Project
from perfweb_recommender.conditions import CONDITIONS

Enqueue = Callable[[int, float], None]

# A new project's rules: (kind, enabled). Thresholds and windows are the conditions' defaults.
DEFAULT_RULES = (
    ("low_utilization", True),
    ("idle_memory_held", True),
    ("stalled", True),
    ("throttling", True),
    ("step_regression", False),
    ("finding_gain", False),
)


def rules_ensure_defaults(*, project: Project) -> list[AlertRule]:
    """Creates the default rules for a project that has none (new projects, and projects
    created before the alerts app)."""
    if AlertRule.objects.filter(project=project).exists():
        return []
    return AlertRule.objects.bulk_create(
        [
            AlertRule(
                project=project,
                kind=kind,
                enabled=enabled,
                threshold=CONDITIONS[kind].default_threshold,
                window_minutes=CONDITIONS[kind].default_window_minutes,
            )
            for kind, enabled in DEFAULT_RULES
        ]
    )


def rule_create(
    *,
    project: Project,
    kind: str,
    threshold: float | None = None,
    window_minutes: float | None = None,
    scope_tag: str = "",
    reminder_minutes: float = 60,
    enabled: bool = True,
) -> AlertRule:
    condition = CONDITIONS[kind]
    return AlertRule.objects.create(
        project=project,
        kind=kind,
        scope_tag=scope_tag.strip(),
        enabled=enabled,
        threshold=condition.default_threshold if threshold is None else threshold,
        window_minutes=condition.default_window_minutes
        if window_minutes is None
        else window_minutes,
        reminder_minutes=reminder_minutes,
    )


def rule_update(*, rule: AlertRule, **fields: Any) -> AlertRule:
    allowed = {"threshold", "window_minutes", "scope_tag", "reminder_minutes", "enabled"}
    for name, value in fields.items():
        if name not in allowed:
            raise TypeError(f"rule_update() got an unexpected field {name!r}")
        setattr(rule, name, value)
    rule.save(update_fields=list(fields))
    return rule


def rule_delete(*, rule: AlertRule) -> None:
    rule.delete()


def channel_create(*, project: Project, kind: str, name: str, config: dict[str, Any]) -> Channel:
    return Channel.objects.create(project=project, kind=kind, name=name, config=config)


def channel_update(
    *, channel: Channel, name: str, config: dict[str, Any], enabled: bool
) -> Channel:
    channel.name, channel.config, channel.enabled = name, config, enabled
    channel.save(update_fields=["name", "config", "enabled"])
    return channel


def channel_delete(*, channel: Channel) -> None:
    channel.delete()


@transaction.atomic
def channel_send_test(*, channel: Channel, user: AbstractBaseUser, enqueue: Enqueue | None) -> int:
    """Queues a test message to this one channel; its attempts are logged like any other."""
    project = channel.project
    now = timezone.now()
    payload = {
        "version": VERSION,
        "id": "",
        "event": "test",
        "state": "test",
        "at": now.isoformat(),
        "summary": f"Test message from perfweb, sent by {user.get_username()}.",
        "numbers": {},
        "why": None,
        "project": {"id": project.id, "name": project.name},
        "rule": {"description": f"test of channel {channel.name}"},
        "alert": None,
        "run": None,
    }
    return deliveries_create(
        project_id=project.id, payload=payload, event=None, enqueue=enqueue, channels=[channel]
    )[0]


def alert_acknowledge(*, alert: Alert, user: AbstractBaseUser) -> bool:
    """Stops reminders for the current firing; a new firing clears it."""
    return (
        Alert.objects.filter(id=alert.id, state=Alert.FIRING, acknowledged_at=None).update(
            acknowledged_at=timezone.now(), acknowledged_by=user
        )
        == 1
    )


def alert_snooze(*, alert: Alert, minutes: float, now: datetime | None = None) -> datetime | None:
    """Silences the alert's notifications for `minutes` (0 lifts the snooze). State changes
    are still stored and shown."""
    until = (now or timezone.now()) + timedelta(minutes=minutes) if minutes > 0 else None
    Alert.objects.filter(id=alert.id).update(snoozed_until=until)
    return until
