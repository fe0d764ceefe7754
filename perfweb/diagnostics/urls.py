from __future__ import annotations

from django.urls import path

from perfweb.diagnostics import views

app_name = "diagnostics"
urlpatterns = [
    path("api/v1/ingest/trace", views.trace_upload, name="ingest-trace"),
    path("api/v1/runs/<str:run_id>/findings", views.run_findings, name="run-findings"),
    path("api/v1/runs/<str:run_id>/steps/bands", views.run_step_bands, name="run-step-bands"),
    path(
        "api/v1/runs/<str:run_id>/traces/<int:trace_id>",
        views.trace_download,
        name="trace-download",
    ),
    path("api/v1/runs/<str:run_id>/workload", views.run_workload, name="run-workload"),
]
