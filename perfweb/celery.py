"""The Celery app: `celery -A perfweb worker` and `celery -A perfweb beat`.

Tasks take ids, re-read state and are safe to run twice; beat's sweeps are the safety net
for anything the broker lost.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

from perfweb.env import env_seconds

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "perfweb.settings")

app = Celery("perfweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_time_limit=300,
    task_soft_time_limit=240,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    timezone="UTC",
)
# Intervals are read here rather than from settings so that importing the app stays cheap.
app.conf.beat_schedule = {
    "sweep-lost-runs": {
        "task": "perfweb.runs.tasks.sweep_lost_runs_task",
        "schedule": env_seconds("PERFWEB_SWEEP_INTERVAL", default=30.0),
    },
    "compact-recent-runs": {
        "task": "perfweb.series.tasks.compact_recent_runs_task",
        "schedule": env_seconds("PERFWEB_COMPACT_INTERVAL", default=60.0),
    },
    "alerts-tick": {
        "task": "perfweb.alerts.tasks.alerts_tick_task",
        "schedule": env_seconds("PERFWEB_ALERT_INTERVAL", default=30.0),
    },
    "jobs-sweep-expired": {
        "task": "perfweb.jobs.tasks.sweep_expired_jobs_task",
        "schedule": env_seconds("PERFWEB_SWEEP_INTERVAL", default=30.0),
    },
    "jobs-verify-recent": {
        "task": "perfweb.jobs.tasks.sweep_unverified_jobs_task",
        "schedule": env_seconds("PERFWEB_SWEEP_INTERVAL", default=30.0),
    },
    "diagnostics-sweep": {
        "task": "perfweb.diagnostics.tasks.diagnose_sweep_task",
        "schedule": env_seconds("PERFWEB_DIAGNOSE_SWEEP_INTERVAL", default=20.0),
    },
}
app.autodiscover_tasks()


@app.on_after_configure.connect
def _make_embedded_broker_folders(sender: Celery, **kwargs: object) -> None:
    # kombu's filesystem transport expects its folders to exist.
    if not str(sender.conf.broker_url).startswith("filesystem"):
        return
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "control_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)
