"""Reads for the alerts app: what a person may see, and what the evaluator needs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.shortcuts import get_object_or_404

from perfweb.alerts.models import Alert, AlertEvent, AlertRule, Channel, Delivery, DeliveryAttempt
from perfweb.projects.models import Project
from perfweb.projects.selectors import project_list_for_user
from perfweb.runs.models import Run


def project_get_for_user(*, user: AbstractBaseUser | AnonymousUser, project_id: int) -> Project:
    """The project if `user` is a member; a 404 otherwise (outsiders learn nothing)."""
    return get_object_or_404(project_list_for_user(user=user), id=project_id)


def rule_list(*, project: Project) -> QuerySet[AlertRule]:
    return AlertRule.objects.filter(project=project).order_by("id")


def channel_list(*, project: Project) -> QuerySet[Channel]:
    return Channel.objects.filter(project=project).order_by("id")


def alert_list(*, project: Project, limit: int = 100) -> QuerySet[Alert]:
    """Firing first, then the most recently changed."""
    firing_first = Case(
        When(state=Alert.FIRING, then=Value(0)), default=Value(1), output_field=IntegerField()
    )
    return (
        Alert.objects.filter(rule__project=project)
        .exclude(state=Alert.OK)
        .select_related("rule", "run", "acknowledged_by")
        .order_by(firing_first, "-changed_at")[:limit]
    )


def event_list(*, project: Project, limit: int = 50) -> QuerySet[AlertEvent]:
    return (
        AlertEvent.objects.filter(alert__rule__project=project)
        .select_related("alert__rule", "alert__run")
        .order_by("-at")[:limit]
    )


def attempt_list(*, channel: Channel, limit: int = 10) -> QuerySet[DeliveryAttempt]:
    return DeliveryAttempt.objects.filter(channel=channel).order_by("-at")[:limit]


def rule_get(*, project: Project, rule_id: int) -> AlertRule:
    return get_object_or_404(AlertRule, project=project, id=rule_id)


def channel_get(*, project: Project, channel_id: int) -> Channel:
    return get_object_or_404(Channel, project=project, id=channel_id)


def alert_get(*, project: Project, alert_id: int) -> Alert:
    return get_object_or_404(Alert, rule__project=project, id=alert_id)


def rules_enabled() -> list[AlertRule]:
    return list(AlertRule.objects.filter(enabled=True).select_related("project").order_by("id"))


def runs_running(*, project_ids: Iterable[int]) -> list[Run]:
    return list(Run.objects.filter(project_id__in=list(project_ids), status=Run.RUNNING))


def run_in_scope(*, run: Run, scope_tag: str) -> bool:
    """Empty scope: every run. "key=value": that tag with that value. "key": any value."""
    if not scope_tag:
        return True
    key, _, value = scope_tag.partition("=")
    tags = run.tags if isinstance(run.tags, dict) else {}
    if key.strip() not in tags:
        return False
    return not value or str(tags[key.strip()]) == value.strip()


def alerts_open_on_ended_runs() -> QuerySet[Alert]:
    """Firing alerts whose run stopped running or whose rule was switched off."""
    return (
        Alert.objects.filter(state=Alert.FIRING)
        .exclude(run__status=Run.RUNNING, rule__enabled=True)
        .select_related("rule__project", "run")
    )


def alerts_due_reminder(*, now: datetime) -> list[Alert]:
    """Firing, unacknowledged, not snoozed, and last told about at least a reminder interval
    ago (or never: its firing fell in a snooze)."""
    firing = Alert.objects.filter(
        state=Alert.FIRING,
        acknowledged_at=None,
        rule__reminder_minutes__gt=0,
        rule__enabled=True,
        run__status=Run.RUNNING,
    ).exclude(snoozed_until__gt=now)
    return [
        alert
        for alert in firing.select_related("rule__project", "run")
        if alert.last_notified_at is None
        or (now - alert.last_notified_at).total_seconds() >= 60 * alert.rule.reminder_minutes
    ]


def deliveries_due(*, now: datetime, claimed_before: datetime, limit: int = 500) -> list[int]:
    """Deliveries neither done nor stopped whose message the broker seems to have lost (due
    since before `claimed_before` and never taken) or whose worker died (claim older than
    `claimed_before`). Fresh ones are left to the message already queued for them."""
    pending = Delivery.objects.filter(delivered_at=None, failed_at=None, due_at__lte=now)
    lost = pending.filter(claimed_at=None, due_at__lt=claimed_before)
    dead = pending.filter(claimed_at__lt=claimed_before)
    return list((lost | dead).order_by("due_at").values_list("id", flat=True)[:limit])
