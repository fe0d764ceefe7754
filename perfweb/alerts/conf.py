"""The alerts app's settings: Django settings first, then the environment, then a default.

PERFWEB_ALERT_INTERVAL       seconds between evaluations by beat (30)
PERFWEB_ALERT_CLAIM_SECONDS  how long a delivery claim holds before a sweep may retry it (60);
                             above the longest send (timeouts are 10 s), so only a dead
                             worker's claim expires
PERFWEB_BASE_URL             absolute address of the dashboard for links in messages
                             (default http://127.0.0.1:8000)
PERFWEB_ALERT_FROM_EMAIL     sender of alert emails (DEFAULT_FROM_EMAIL when unset)
PERFWEB_ALERT_ALLOWED_NETWORKS  non-public networks / host names webhooks may reach (empty);
                             read by perfweb/alerts/channels/addresses.py
"""

from __future__ import annotations

from django.conf import settings

from perfweb.env import env_seconds, env_str


def _seconds(name: str, default: float) -> float:
    value = getattr(settings, name, None)
    return float(value) if value is not None else env_seconds(name, default=default)


def evaluation_interval() -> float:
    return _seconds("PERFWEB_ALERT_INTERVAL", 30.0)


def claim_seconds() -> float:
    return _seconds("PERFWEB_ALERT_CLAIM_SECONDS", 60.0)


def base_url() -> str:
    value = getattr(settings, "PERFWEB_BASE_URL", None)
    return str(value or env_str("PERFWEB_BASE_URL", default="http://127.0.0.1:8000")).rstrip("/")


def from_email() -> str:
    value = getattr(settings, "PERFWEB_ALERT_FROM_EMAIL", None)
    return str(value or env_str("PERFWEB_ALERT_FROM_EMAIL", default=settings.DEFAULT_FROM_EMAIL))
