from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "perfweb.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"
