"""perfweb: the Django server (ingest, storage, read API, dashboard, Celery tasks)."""

from __future__ import annotations

from perfweb.celery import app as celery_app

__all__ = ["celery_app"]
