"""Settings come from the environment and fail loudly, naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from perfweb.env import database_from_url, env_bool, env_int, env_list, env_seconds, env_str

ROOT = Path(__file__).resolve().parents[2]


def test_it_reads_booleans() -> None:
    assert env_bool("DEBUG", default=False, environ={"DEBUG": "Yes"}) is True
    assert env_bool("DEBUG", default=True, environ={"DEBUG": "0"}) is False
    assert env_bool("DEBUG", default=True, environ={}) is True


def test_it_names_the_variable_of_a_bad_boolean() -> None:
    with pytest.raises(ImproperlyConfigured, match="DEBUG must be one of .* not 'maybe'"):
        env_bool("DEBUG", default=False, environ={"DEBUG": "maybe"})


def test_it_reads_lists() -> None:
    environ = {"ALLOWED_HOSTS": " a.example, b.example ,,"}
    assert env_list("ALLOWED_HOSTS", default=[], environ=environ) == ["a.example", "b.example"]
    assert env_list("ALLOWED_HOSTS", default=["x"], environ={}) == ["x"]


def test_it_requires_a_variable_without_default() -> None:
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be set"):
        env_str("SECRET_KEY", environ={"SECRET_KEY": "  "})


@pytest.mark.parametrize("raw", ["soon", "-1", "0", "inf"])
def test_it_names_the_variable_of_bad_seconds(raw: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="PERFWEB_LOST_AFTER must be a"):
        env_seconds("PERFWEB_LOST_AFTER", default=120, environ={"PERFWEB_LOST_AFTER": raw})


def test_it_parses_a_postgresql_url() -> None:
    database = database_from_url("postgresql://me:p%40ss@db.example:6543/perfweb")
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["NAME"], database["USER"], database["PASSWORD"]) == ("perfweb", "me", "p@ss")
    assert (database["HOST"], database["PORT"]) == ("db.example", "6543")


def test_it_parses_sqlite_urls() -> None:
    assert database_from_url("sqlite:////var/lib/perfweb.db")["NAME"] == "/var/lib/perfweb.db"
    assert database_from_url("sqlite:///data/perfweb.db")["NAME"] == "data/perfweb.db"
    options = database_from_url("sqlite:///x.db")["OPTIONS"]
    assert "journal_mode=WAL" in options["init_command"] and options["timeout"] >= 5


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://db/perfweb", "DATABASE_URL must start with postgresql:// or sqlite:///"),
        ("postgresql://db.example", "DATABASE_URL names no database"),
        ("postgresql://db.example:port/x", "DATABASE_URL has a bad port"),
        ("sqlite://", "DATABASE_URL names no SQLite file"),
    ],
)
def test_it_names_the_variable_of_a_bad_database_url(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        database_from_url(url)


def load_settings(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "REDIS_URL")}
    env.update(PERFWEB_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="perfweb.settings", **environ)
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CELERY_BROKER_URL, s.DATABASES['default']['ENGINE'])"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_it_refuses_to_start_a_server_without_a_secret_key(tmp_path: Path) -> None:
    result = load_settings(tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_it_uses_sqlite_and_the_embedded_broker_by_default(tmp_path: Path) -> None:
    result = load_settings(tmp_path, SECRET_KEY="s3cret")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["filesystem://", "django.db.backends.sqlite3"]


def test_it_uses_redis_when_given(tmp_path: Path) -> None:
    result = load_settings(tmp_path, SECRET_KEY="s3cret", REDIS_URL="redis://127.0.0.1:6379/5")
    assert result.stdout.split()[0] == "redis://127.0.0.1:6379/5"


@pytest.mark.parametrize(
    ("raw", "message"),
    [("smtp", "a whole number"), ("0", "at least 1"), ("2_5", "a whole number"),
     ("\u0662\u0665", "a whole number"), ("0x19", "a whole number"), ("2.5", "a whole number")],
)  # fmt: skip
def test_it_names_the_variable_of_a_bad_whole_number(raw: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"EMAIL_PORT must be {message}"):
        env_int("EMAIL_PORT", default=25, minimum=1, environ={"EMAIL_PORT": raw})


def test_it_reads_the_mail_server_for_alert_emails(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMAIL_")}
    env.update(
        PERFWEB_DATA_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="perfweb.settings",
        DEBUG="true",
        EMAIL_HOST="smtp.example.org",
        EMAIL_PORT="587",
        EMAIL_USE_TLS="yes",
        DEFAULT_FROM_EMAIL="perf@example.org",
    )
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_USE_TLS, s.DEFAULT_FROM_EMAIL)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["smtp.example.org", "587", "True", "perf@example.org"]
    env.update(EMAIL_USE_SSL="true")
    both = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert both.returncode != 0 and "cannot both be true" in both.stderr


def _settings_under_manage_py(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    env.update(PERFWEB_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="perfweb.settings")
    code = (
        f"import sys; sys.argv = ['manage.py', {command!r}]; "
        "import django; django.setup(); from django.conf import settings as s; "
        "print(repr(s._wrapped.SECRET_KEY))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_it_runs_the_database_commands_without_a_secret_key(tmp_path: Path) -> None:
    """The README's `manage.py bootstrap` works from a plain shell; the key stays unset, so
    anything that would sign with it still fails (Django refuses an empty SECRET_KEY)."""
    for command in ("bootstrap", "migrate"):
        result = _settings_under_manage_py(tmp_path, command)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "''"


def test_it_still_refuses_to_serve_from_manage_py_without_a_secret_key(tmp_path: Path) -> None:
    result = _settings_under_manage_py(tmp_path, "runserver")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr
