from __future__ import annotations

from django.urls import path

from perfweb.api import ingest, read

urlpatterns = [
    path("ingest/start", ingest.start, name="ingest-start"),
    path("ingest/batch", ingest.batch, name="ingest-batch"),
    path("ingest/heartbeat", ingest.heartbeat, name="ingest-heartbeat"),
    path("ingest/finish", ingest.finish, name="ingest-finish"),
    path("runs", read.runs, name="api-runs"),
    path("runs/<str:run_id>", read.run, name="api-run"),
    path("runs/<str:run_id>/series", read.series, name="api-run-series"),
    path("runs/<str:run_id>/timeline", read.timeline, name="api-run-timeline"),
]
