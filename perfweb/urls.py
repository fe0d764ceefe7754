from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from perfweb.api.urls import PREFIX as API_PREFIX

urlpatterns = [
    path(API_PREFIX, include("perfweb.api.urls")),  # every /api/v1 route, and only there
    path("admin/", admin.site.urls),
    path("", include("perfweb.fleet.urls")),  # /metrics (Prometheus)
    path("alerts/", include("perfweb.alerts.urls")),
    path("projects/", include("perfweb.projects.urls")),  # tokens and members
    path("", include("perfweb.jobs.urls")),  # /jobs/..., /runs/<id>/jobs/
    path("", include("perfweb.dashboard.urls")),
]
