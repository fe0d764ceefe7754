from __future__ import annotations

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "perfweb.alerts"
    label = "alerts"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.alerts import signals  # noqa: F401  (connects the new-project defaults)
