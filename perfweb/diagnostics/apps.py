from __future__ import annotations

from django.apps import AppConfig


class DiagnosticsConfig(AppConfig):
    name = "perfweb.diagnostics"
    label = "diagnostics"
    verbose_name = "Diagnostics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.dashboard.panels import register_run_panel
        from perfweb.diagnostics import signals  # noqa: F401  (re-rank on a verified fix)
        from perfweb.diagnostics.panel import findings_panel
        from perfweb.diagnostics.requests_panel import requests_panel
        from perfweb.diagnostics.trace_panel import traces_panel

        register_run_panel(requests_panel, order=5)  # an inference run's charts come first
        register_run_panel(findings_panel, order=10)
        register_run_panel(traces_panel, order=15)
