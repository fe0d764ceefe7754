from __future__ import annotations

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "perfweb.jobs"
    label = "jobs"
    verbose_name = "Optimisation jobs"
