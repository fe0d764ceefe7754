"""Settings, read from the environment (see perfweb/env.py; every bad value fails loudly).

DATABASE_URL   postgresql://user:pass@host:5432/name or sqlite:///path
               (default: SQLite file $PERFWEB_DATA_DIR/perfweb.sqlite3)
REDIS_URL      Celery broker and results; unset: kombu's filesystem transport under the
               data directory, so the one-command mode needs no Redis
SECRET_KEY     required unless DEBUG (or for `manage.py migrate|bootstrap|createsuperuser|
               changepassword`, which sign nothing and only write the database)
ALLOWED_HOSTS  comma-separated (default: localhost,127.0.0.1 — and * under DEBUG)
DEBUG          true/false (default false)
PERFWEB_DATA_DIR    where SQLite, the embedded broker and beat's schedule live (default .data/)
PERFWEB_LOST_AFTER  seconds of agent silence after which a running run is marked lost (120)
PERFWEB_SWEEP_INTERVAL    seconds between beat's lost-run sweeps (30)
PERFWEB_UNSENT_WAIT seconds the sweep spares a run whose agent said its finish waits on its
                    host, to be replayed by the next agent there or `perf-agent upload` (86400)
PERFWEB_COMPACT_INTERVAL  seconds between beat's chunk compactions (60)
EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL,
DEFAULT_FROM_EMAIL  the SMTP server for alert e-mails (default localhost:25, no auth)
PERFWEB_LOGIN_FAILURE_LIMIT  wrong passwords (one username, one address) before a lock-out (5)
PERFWEB_LOGIN_COOLOFF        seconds a lock-out lasts (900); see perfweb/dashboard/login_throttle.py
Apps read their own: PERFWEB_ALERT_* and PERFWEB_BASE_URL (perfweb/alerts/conf.py),
PERFWEB_TRACE_*, PERFWEB_DIAGNOSE_* (perfweb/diagnostics/conf.py), PERFWEB_JOB_CLAIM_TTL.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from perfweb.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_seconds,
    env_str,
    sqlite_database,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("PERFWEB_DATA_DIR", default=str(BASE_DIR / ".data"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)
(DATA_DIR / "static").mkdir(exist_ok=True)  # whitenoise warns when STATIC_ROOT is missing

DEBUG = env_bool("DEBUG", default=False)
# A test run needs no secret; a server does (pytest-django loads these settings before any
# conftest could set the variable).
TESTING = "pytest" in sys.modules
# The commands that set the database up sign nothing (no session, no CSRF token), so they run
# from a plain shell: `manage.py bootstrap` is how a newcomer gets a token. Any server or worker
# (gunicorn, runserver, celery) still fails at start without the secret. Left empty here,
# Django itself refuses any later use of the key.
DATABASE_COMMANDS = frozenset({"migrate", "bootstrap", "createsuperuser", "changepassword"})
_DATABASE_COMMAND = (
    Path(sys.argv[0]).name == "manage.py" and len(sys.argv) > 1 and sys.argv[1] in DATABASE_COMMANDS
)
SECRET_KEY = env_str(
    "SECRET_KEY",
    default="insecure-debug-or-test-only-key"
    if DEBUG or TESTING
    else ("" if _DATABASE_COMMAND else None),
)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", default=["*"] if DEBUG else ["localhost", "127.0.0.1"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "perfweb.projects",
    "perfweb.runs",
    "perfweb.series",
    "perfweb.api",
    "perfweb.dashboard",
    "perfweb.alerts",
    "perfweb.jobs",
    "perfweb.diagnostics",
    "perfweb.fleet",
    "axes",  # login throttling (perfweb/dashboard/login_throttle.py); replaces nothing
]

MIDDLEWARE = [
    "perfweb.api.middleware.nul_guard",  # a NUL in a URL, form or cookie: 400, not a 500
    "django.middleware.security.SecurityMiddleware",
    "perfweb.dashboard.csp.content_security_policy",  # scripts from this origin only
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # turns a locked-out login into a 429
]

ROOT_URLCONF = "perfweb.urls"
WSGI_APPLICATION = "perfweb.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

_database_url = env_str("DATABASE_URL", default="")
DATABASES = {
    "default": database_from_url(_database_url)
    if _database_url
    else sqlite_database(path=DATA_DIR / "perfweb.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
AUTHENTICATION_BACKENDS = [
    "perfweb.dashboard.login_throttle.LoginThrottleBackend",  # first: refuses when locked out
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PERFWEB_LOGIN_FAILURE_LIMIT", default=5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_seconds("PERFWEB_LOGIN_COOLOFF", default=900.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True  # a successful login clears the failures of that pair
AXES_VERBOSE = False
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the apps' static/ folders too, so runserver and a fresh checkout need
# no collectstatic step.
WHITENOISE_USE_FINDERS = True

# The ingest view reads the raw body itself (gzip, 413 by its own limits).
DATA_UPLOAD_MAX_MEMORY_SIZE = None

PERFWEB_LOST_AFTER = env_seconds("PERFWEB_LOST_AFTER", default=120.0)
PERFWEB_UNSENT_WAIT = env_seconds("PERFWEB_UNSENT_WAIT", default=86400.0)
# Beat's intervals (PERFWEB_SWEEP_INTERVAL, PERFWEB_COMPACT_INTERVAL) are read in celery.py.

# Alert e-mails (perfweb/alerts/channels): Django's SMTP backend, configured here.
EMAIL_HOST = env_str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env_int("EMAIL_PORT", default=25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", default=False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be true")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", default="perfweb@localhost")

# Celery (perfweb/celery.py reads the CELERY_* names).
REDIS_URL = env_str("REDIS_URL", default="")
CELERY_BROKER_URL = REDIS_URL or "filesystem://"
CELERY_RESULT_BACKEND = REDIS_URL or None
# The queue every task goes to and every worker reads: deployments (or test stacks) that share
# one Redis keep apart by naming their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("PERFWEB_CELERY_QUEUE", default="celery")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = (
    # Above the longest task's time limit, so Redis redelivers only tasks whose worker died.
    {"visibility_timeout": 3600}
    if REDIS_URL
    else {
        "data_folder_in": str(DATA_DIR / "broker" / "queue"),
        "data_folder_out": str(DATA_DIR / "broker" / "queue"),
        "control_folder": str(DATA_DIR / "broker" / "control"),
        "store_processed": False,
    }
)
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
