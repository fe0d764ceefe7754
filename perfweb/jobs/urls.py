"""Included once from perfweb/urls.py at the root: the job pages (the runner's API is routed
by perfweb/api/urls.py)."""

from __future__ import annotations

from django.urls import path

from perfweb.jobs import views

app_name = "jobs"

urlpatterns = [
    path("runs/<str:run_id>/jobs/", views.run_jobs, name="run_jobs"),
    path("runs/<str:run_id>/jobs.json", views.run_jobs_json, name="run_jobs_json"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>.json", views.job_json, name="job_json"),
    path("jobs/<int:job_id>/cancel", views.job_cancel, name="job_cancel"),
]
