"""Typed readers for the environment: every bad value fails loudly, naming its variable."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def env_str(
    name: str, *, default: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The variable's value; without a default, an unset or empty variable is an error."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if value:
        return value
    if default is None:
        raise ImproperlyConfigured(f"{name} must be set")
    return default


def env_bool(name: str, *, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, not {raw!r}")


def env_list(
    name: str, *, default: list[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """A comma-separated list; blanks between commas are dropped."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or not raw.strip():
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


# An optional sign and ASCII digits: int() alone also takes "4_0", "٤" and "²".
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")


def env_int(
    name: str, *, default: int, minimum: int = 0, environ: Mapping[str, str] | None = None
) -> int:
    """A whole number, at least `minimum`."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or not raw.strip():
        return default
    if _WHOLE_NUMBER.fullmatch(raw.strip()) is None:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}")
    value = int(raw.strip(), 10)
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {raw!r}")
    return value


def env_seconds(name: str, *, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A positive number of seconds."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number of seconds, not {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ImproperlyConfigured(f"{name} must be a positive number of seconds, not {raw!r}")
    return value


def database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict[str, Any]:
    """Django's DATABASES entry for a postgresql://… or sqlite:///path URL."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        return _postgresql(url, parts=parts, name=name)
    if parts.scheme == "sqlite":
        return sqlite_database(path=_sqlite_path(url, parts=parts, name=name))
    raise ImproperlyConfigured(
        f"{name} must start with postgresql:// or sqlite:///, not {parts.scheme or url!r}"
    )


def sqlite_database(*, path: Path | str) -> dict[str, Any]:
    # Web, worker, beat and ingest write at once: WAL lets readers run beside the writer,
    # IMMEDIATE takes the write lock up front (a deferred upgrade would fail without
    # waiting), and the timeout makes writers queue instead of raising "database is locked".
    # Persistent connections: closing the last connection to a WAL database checkpoints it,
    # which would cost every request more than its own work.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
        },
    }


def _postgresql(url: str, *, parts: Any, name: str) -> dict[str, Any]:
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ImproperlyConfigured(f"{name} names no database: {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has a bad port: {url!r}") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        # Django's default (None) turns psycopg's statement preparation off. Django's own
        # cursors bind on the client and never prepare either way; perfweb.db's prepared
        # cursor does, once a statement has run this many times on a connection.
        "OPTIONS": {"prepare_threshold": 5},
    }


def _sqlite_path(url: str, *, parts: Any, name: str) -> str:
    # sqlite:///relative/file, sqlite:////absolute/file
    path = url[len("sqlite://") :]
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise ImproperlyConfigured(f"{name} names no SQLite file: {url!r}")
    return path
