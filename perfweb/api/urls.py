from __future__ import annotations

from django.urls import path

from perfweb.api import ingest, read
from perfweb.api.http import server_timing
from perfweb.fleet.views import waste_api

urlpatterns = [
    path("ingest/start", server_timing(ingest.start), name="ingest-start"),
    path("ingest/batch", server_timing(ingest.batch), name="ingest-batch"),
    path("ingest/heartbeat", server_timing(ingest.heartbeat), name="ingest-heartbeat"),
    path("ingest/finish", server_timing(ingest.finish), name="ingest-finish"),
    path("runs", server_timing(read.runs), name="api-runs"),
    path("waste", server_timing(waste_api), name="api-waste"),
    path("runs/<str:run_id>", server_timing(read.run), name="api-run"),
    path("runs/<str:run_id>/series", server_timing(read.series), name="api-run-series"),
    path("runs/<str:run_id>/timeline", server_timing(read.timeline), name="api-run-timeline"),
]
