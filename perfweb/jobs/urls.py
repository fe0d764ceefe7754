"""Included once from perfweb/urls.py at the root: the runner API and the job pages."""

from __future__ import annotations

from django.urls import path

from perfweb.jobs import api, views

app_name = "jobs"

urlpatterns = [
    path("api/v1/jobs/claim", api.claim, name="api_claim"),
    path("api/v1/jobs/<int:job_id>/progress", api.progress, name="api_progress"),
    path("api/v1/jobs/<int:job_id>/result", api.result, name="api_result"),
    path("api/v1/jobs/<int:job_id>/fail", api.fail, name="api_fail"),
    path("runs/<str:run_id>/jobs/", views.run_jobs, name="run_jobs"),
    path("runs/<str:run_id>/jobs.json", views.run_jobs_json, name="run_jobs_json"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>.json", views.job_json, name="job_json"),
    path("jobs/<int:job_id>/cancel", views.job_cancel, name="job_cancel"),
]
