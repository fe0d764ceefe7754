"""The local servers some tests need, and the rule for when they are missing: under CI=true
the test fails (never skips); elsewhere it skips with the reason."""

from __future__ import annotations

import os
import socket

import pytest

POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_server(name: str, host: str, port: int) -> None:
    """Fails (CI) or skips (elsewhere) the calling test when nothing listens on host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as error:
        message = f"{name} is not reachable on {host}:{port} ({error})"
    if in_ci():
        pytest.fail(f"{message}; CI=true requires it")
    pytest.skip(message)


def require_postgres() -> None:
    require_server("PostgreSQL", POSTGRES_HOST, POSTGRES_PORT)


def require_redis() -> None:
    require_server("Redis", REDIS_HOST, REDIS_PORT)
