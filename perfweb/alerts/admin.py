from __future__ import annotations

from django.contrib import admin

from perfweb.alerts.models import Alert, AlertEvent, AlertRule, Channel, Delivery, DeliveryAttempt


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "kind", "threshold", "window_minutes", "scope_tag", "enabled")
    list_filter = ("kind", "enabled")


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "kind", "name", "enabled", "last_error")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("id", "rule", "run", "state", "changed_at", "acknowledged_at", "snoozed_until")
    list_filter = ("state",)


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    list_display = ("id", "alert", "kind", "at", "suppressed", "summary")


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "channel", "event", "attempts", "due_at", "delivered_at", "failed_at")


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(admin.ModelAdmin):
    list_display = ("id", "channel", "delivery", "at", "outcome", "duration_ms", "detail")
    list_filter = ("outcome",)
