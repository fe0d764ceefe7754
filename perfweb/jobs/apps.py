from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "perfweb.jobs"
    label = "jobs"
    verbose_name = "Optimisation jobs"

    def ready(self) -> None:
        from perfweb.jobs import tasks  # noqa: F401  (registered: services send them by name)
        from perfweb.jobs.panel import jobs_panel
        from perfweb.pages.panels import register_run_panel

        register_run_panel(jobs_panel, order=20)
