from __future__ import annotations

from django.apps import AppConfig


class DiagnosticsConfig(AppConfig):
    name = "perfweb.diagnostics"
    label = "diagnostics"
    verbose_name = "Diagnostics"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.diagnostics import (
            signals,  # noqa: F401  (a trace file goes with its row)
            tasks,  # noqa: F401  (registered: sent by name)
        )
        from perfweb.diagnostics.panel import findings_panel
        from perfweb.diagnostics.requests_panel import requests_panel
        from perfweb.diagnostics.trace_panel import traces_panel
        from perfweb.pages.panels import register_run_panel

        register_run_panel(requests_panel, order=5)  # an inference run's charts come first
        register_run_panel(findings_panel, order=10)
        register_run_panel(traces_panel, order=15)
