"""The Grafana dashboard in docs/monitoring reads only metrics that /metrics exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs/monitoring/grafana/dashboards/perfweb.json"


def queries(dashboard: dict) -> list[str]:
    found = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    found += [v["query"] for v in dashboard["templating"]["list"]]
    return found


@pytest.mark.django_db
def test_every_query_of_the_dashboard_names_an_exported_metric(token: str) -> None:
    body = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").content.decode()
    exported = {family.name for family in text_string_to_metric_families(body)}
    dashboard = json.loads(DASHBOARD.read_text())
    named = {name for query in queries(dashboard) for name in re.findall(r"perfweb_\w+", query)}
    assert named, "the dashboard queries nothing"
    assert named <= exported, f"not exported: {sorted(named - exported)}"
    provisioned = yaml.safe_load(
        (ROOT / "docs/monitoring/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    uids = {source["uid"] for source in provisioned["datasources"]}
    assert {panel["datasource"]["uid"] for panel in dashboard["panels"]} <= uids
