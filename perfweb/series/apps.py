from __future__ import annotations

from django.apps import AppConfig


class SeriesConfig(AppConfig):
    name = "perfweb.series"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from perfweb.series import signals  # noqa: F401  (compacts a run when it ends)
