from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "perfweb.runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from perfweb.db import arrays_on_new_connections

        connection_created.connect(arrays_on_new_connections, dispatch_uid="perfweb-arrays")
