"""docker-compose.yml and the Procfile must agree with the settings they feed.

Docker cannot run on the CI machines, so this test does what `docker compose config` and a
boot would catch: the services exist, share one image, run the right commands, and every
environment variable they set is one the settings actually read — proven by loading the
settings in a fresh interpreter with exactly that environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PERFWEB_SERVICES = ("web", "worker", "beat")
MONITORING_SERVICES = ("prometheus", "grafana")  # profile `monitoring` only


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _settings_under(environment: dict[str, str]) -> dict:
    """Import the settings and the Celery app in a clean interpreter with `environment`."""
    probe = (
        "import json, django\n"
        "django.setup()\n"
        "from django.conf import settings\n"
        "from perfweb.celery import app\n"
        "db = settings.DATABASES['default']\n"
        "print(json.dumps({'engine': db['ENGINE'], 'host': db.get('HOST'), 'name': db['NAME'],\n"
        "  'user': db.get('USER'), 'debug': settings.DEBUG, 'hosts': settings.ALLOWED_HOSTS,\n"
        "  'secret': settings.SECRET_KEY, 'broker': app.conf.broker_url,\n"
        "  'lost_after': settings.PERFWEB_LOST_AFTER, 'email_host': settings.EMAIL_HOST,\n"
        "  'unsent_wait': settings.PERFWEB_UNSENT_WAIT,\n"
        "  'email_port': settings.EMAIL_PORT, 'mail_from': settings.DEFAULT_FROM_EMAIL}))\n"
    )
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "perfweb.settings", **environment}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _resolved_environment(service: dict) -> dict[str, str]:
    """The service's environment, `${VAR:-default}` and `${VAR:?msg}` resolved as compose would."""
    resolved = {}
    for name, value in service["environment"].items():
        value = str(value)
        if value.startswith("${"):
            inner = value[2:-1]
            default = inner.split(":-", 1)[1] if ":-" in inner else f"compose-{name.lower()}"
            value = default
        resolved[name] = value
    return resolved


def test_it_defines_the_production_services() -> None:
    services = _compose()["services"]
    assert set(services) == {"postgres", "redis", *PERFWEB_SERVICES, *MONITORING_SERVICES}
    images = {services[name]["image"] for name in PERFWEB_SERVICES}
    assert images == {"perfweb:latest"}, "web, worker and beat must run one image"
    assert "gunicorn perfweb.wsgi" in services["web"]["command"]
    assert services["worker"]["command"].startswith("celery -A perfweb worker")
    assert services["beat"]["command"].startswith("celery -A perfweb beat")
    for name in PERFWEB_SERVICES:
        assert set(services[name]["depends_on"]) == {"postgres", "redis"}


def test_it_feeds_the_settings_variables_they_read() -> None:
    services = _compose()["services"]
    environment = _resolved_environment(services["web"])
    settings = _settings_under(environment)
    postgres = services["postgres"]["environment"]
    assert settings["engine"] == "django.db.backends.postgresql"
    assert settings["host"] == "postgres"
    assert settings["name"] == postgres["POSTGRES_DB"]
    assert settings["user"] == postgres["POSTGRES_USER"]
    assert settings["broker"] == environment["REDIS_URL"]
    assert settings["debug"] is False
    assert settings["hosts"] == environment["ALLOWED_HOSTS"].split(",")
    assert settings["secret"] == environment["SECRET_KEY"]
    assert settings["lost_after"] == int(environment["PERFWEB_LOST_AFTER"])
    assert settings["unsent_wait"] == int(environment["PERFWEB_UNSENT_WAIT"])
    assert settings["email_host"] == environment["EMAIL_HOST"]
    assert settings["email_port"] == int(environment["EMAIL_PORT"])
    assert settings["mail_from"] == environment["DEFAULT_FROM_EMAIL"]


def test_it_fails_loudly_without_a_secret_key_in_production() -> None:
    environment = _resolved_environment(_compose()["services"]["web"])
    del environment["SECRET_KEY"]
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "perfweb.settings", **environment}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "SECRET_KEY" in done.stderr


def test_the_procfile_runs_the_same_programs() -> None:
    lines = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip()
    )
    assert set(lines) == {"web", "worker", "beat"}  # start.sh runs the demo beside them
    assert "gunicorn perfweb.wsgi" in lines["web"]
    assert "celery -A perfweb worker" in lines["worker"]
    assert "celery -A perfweb beat" in lines["beat"]


def test_the_monitoring_profile_scrapes_metrics_with_a_token_and_provisions_grafana() -> None:
    services = _compose()["services"]
    for name in MONITORING_SERVICES:
        assert services[name]["profiles"] == ["monitoring"]  # `up` alone starts neither
    mounts = {m.split(":")[1]: m.split(":")[0] for m in services["prometheus"]["volumes"]}
    config = yaml.safe_load((ROOT / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["web:8000"]
    assert job["authorization"]["credentials_file"] in mounts  # the token file is mounted
    web_hosts = services["web"]["environment"]["ALLOWED_HOSTS"]
    assert "web" in web_hosts.split(":-")[1].rstrip("}").split(",")  # the scrape's Host
    grafana = {m.split(":")[1]: m.split(":")[0] for m in services["grafana"]["volumes"]}
    assert (ROOT / grafana["/etc/grafana/provisioning"] / "datasources").is_dir()
    assert list((ROOT / grafana["/var/lib/grafana/dashboards"]).glob("*.json"))
