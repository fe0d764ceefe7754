from __future__ import annotations

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "perfweb.alerts"
    label = "alerts"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.alerts import signals  # noqa: F401  (connects the new-project defaults)
        from perfweb.alerts.panel import alerts_panel
        from perfweb.pages.nav import NavLink, register_nav_link
        from perfweb.pages.panels import register_run_panel

        register_nav_link(NavLink(label="Alerts", url_name="alerts:index", prefix="/alerts/"))
        register_run_panel(alerts_panel, order=30)
