"""Alert rules and channels per project; alerts per (rule, run); their state changes as rows;
one delivery row per (state change, channel) claimed with a conditional UPDATE; one attempt
row per try."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from perfweb.alerts.channels import CHOICES as CHANNEL_CHOICES
from perfweb.projects.models import Project
from perfweb.runs.models import Run
from perfweb_recommender.conditions import CONDITIONS

RULE_KINDS = [
    (kind, c.label.replace("{threshold}", "X").replace("{window}", "Y"))
    for kind, c in CONDITIONS.items()
]


class AlertRule(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_rules")
    kind = models.CharField(max_length=32, choices=RULE_KINDS)
    threshold = models.FloatField()
    window_minutes = models.FloatField()
    # Empty: every run of the project; "key=value" or "key": runs whose tags match.
    scope_tag = models.CharField(max_length=200, blank=True)
    # Re-notify a firing, unacknowledged alert this often; 0 = never.
    reminder_minutes = models.FloatField(default=60)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["project", "enabled"], name="alertrule_project")]

    def __str__(self) -> str:
        return CONDITIONS[self.kind].describe(
            threshold=self.threshold, window_minutes=self.window_minutes
        )


class Channel(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_channels")
    kind = models.CharField(max_length=16, choices=CHANNEL_CHOICES)
    name = models.CharField(max_length=100)
    config = models.JSONField(default=dict)  # validated by the channel module's ConfigForm
    enabled = models.BooleanField(default=True)
    # The last permanent failure, shown on the channel until a delivery succeeds again.
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Alert(models.Model):
    OK, FIRING, RESOLVED = "ok", "firing", "resolved"
    STATES = [(s, s) for s in (OK, FIRING, RESOLVED)]

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alerts")
    state = models.CharField(max_length=10, choices=STATES, default=OK)
    changed_at = models.DateTimeField(null=True, blank=True)
    summary = models.CharField(max_length=500, blank=True)  # the latest verdict, for the page
    why = models.CharField(max_length=300, blank=True)  # the top diagnosis when it fired
    last_notified_at = models.DateTimeField(null=True, blank=True)  # firing or reminder
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    snoozed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "run"], name="alert_rule_run")]
        indexes = [models.Index(fields=["state", "last_notified_at"], name="alert_state")]


class AlertEvent(models.Model):
    """A state change (or a reminder) of an alert, with the message it is announced by."""

    FIRING, RESOLVED, REMINDER = "firing", "resolved", "reminder"
    KINDS = [(k, k) for k in (FIRING, RESOLVED, REMINDER)]

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=10, choices=KINDS)
    from_state = models.CharField(max_length=10)
    to_state = models.CharField(max_length=10)
    at = models.DateTimeField()
    summary = models.CharField(max_length=500)
    payload = models.JSONField()  # the message as sent (docs/webhooks.md)
    suppressed = models.BooleanField(default=False)  # snoozed: stored, not sent

    class Meta:
        indexes = [models.Index(fields=["alert", "-at"], name="alertevent_alert_at")]


class Delivery(models.Model):
    """The outbox: one message for one channel. A worker owns it while `claimed_at` is
    recent; a claim older than PERFWEB_ALERT_CLAIM_SECONDS belongs to a dead worker and may
    be taken again. `event` is NULL for a "send test" message."""

    key = models.UUIDField(default=uuid.uuid4, unique=True)  # idempotency key for receivers
    event = models.ForeignKey(
        AlertEvent, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    due_at = models.DateTimeField()  # not before (backoff)
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)  # permanent failure: stopped
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["delivered_at", "failed_at", "due_at"], name="delivery_pending")
        ]
        verbose_name_plural = "deliveries"


class DeliveryAttempt(models.Model):
    STARTED, OK, TRANSIENT, PERMANENT = "started", "ok", "transient", "permanent"
    INTERRUPTED = "interrupted"  # still "started" when the next claim came: the worker died
    OUTCOMES = [(o, o) for o in (STARTED, OK, TRANSIENT, PERMANENT, INTERRUPTED)]

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="attempts")
    at = models.DateTimeField()
    outcome = models.CharField(max_length=12, choices=OUTCOMES)
    detail = models.CharField(max_length=500, blank=True)
    duration_ms = models.IntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["channel", "-at"], name="attempt_channel_at")]
