from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("api/v1/", include("perfweb.api.urls")),
    path("", include("perfweb.diagnostics.urls")),  # /api/v1/ingest/trace, .../findings
    path("admin/", admin.site.urls),
    path("", include("perfweb.fleet.urls")),  # /metrics (Prometheus)
    path("alerts/", include("perfweb.alerts.urls")),
    path("", include("perfweb.jobs.urls")),  # /api/v1/jobs/..., /jobs/..., /runs/<id>/jobs/
    path("", include("perfweb.dashboard.urls")),
]
