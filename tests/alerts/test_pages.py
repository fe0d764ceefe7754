"""The alerts pages: members (owner, teammate) see and edit; an outsider gets 404 everywhere."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from perfweb.alerts import services
from perfweb.alerts.models import Alert, AlertRule, Channel, Delivery
from tests.alerts.conftest import login, run_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def channel(project: Any) -> Channel:
    return services.channel_create(
        project=project, kind="webhook", name="ops hook", config={"url": "http://127.0.0.1:9/hook"}
    )


@pytest.fixture
def alert(project: Any) -> Alert:
    rule = AlertRule.objects.get(project=project, kind="low_utilization")
    run = run_create(project=project)
    return Alert.objects.create(rule=rule, run=run, state=Alert.FIRING, summary="GPU at 4%")


def pages(project: Any, channel: Channel, alert: Alert) -> list[tuple[str, str]]:
    p = project.id
    rule = alert.rule
    return [
        ("get", reverse("alerts:project", args=[p])),
        ("get", reverse("alerts:rule_edit", args=[p, rule.id])),
        ("get", reverse("alerts:channel_edit", args=[p, channel.id])),
        ("post", reverse("alerts:rule_new", args=[p])),
        ("post", reverse("alerts:rule_delete", args=[p, rule.id])),
        ("post", reverse("alerts:channel_new", args=[p])),
        ("post", reverse("alerts:channel_test", args=[p, channel.id])),
        ("post", reverse("alerts:channel_delete", args=[p, channel.id])),
        ("post", reverse("alerts:alert_ack", args=[p, alert.id])),
        ("post", reverse("alerts:alert_snooze", args=[p, alert.id])),
    ]


def test_it_shows_rules_channels_and_alerts_to_the_owner(
    owner: Any, project: Any, channel: Channel, alert: Alert
) -> None:
    response = login(owner).get(reverse("alerts:project", args=[project.id]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "GPU utilisation below 30% for 5 min" in page
    assert "ops hook" in page and "Send test" in page
    assert "GPU at 4%" in page and "Acknowledge" in page


def test_it_shows_the_teammate_the_same_page(teammate: Any, project: Any, alert: Alert) -> None:
    response = login(teammate).get(reverse("alerts:project", args=[project.id]))
    assert response.status_code == 200
    assert "GPU at 4%" in response.content.decode()


def test_it_answers_404_to_an_outsider_on_every_page(
    outsider: Any, other_project: Any, project: Any, channel: Channel, alert: Alert
) -> None:
    client = login(outsider)
    for method, url in pages(project, channel, alert):
        assert getattr(client, method)(url).status_code == 404, url
    assert Channel.objects.filter(id=channel.id).exists()
    assert AlertRule.objects.filter(id=alert.rule_id).exists()


def test_it_sends_anonymous_people_to_the_login(
    project: Any, channel: Channel, alert: Alert
) -> None:
    from django.test import Client

    response = Client().get(reverse("alerts:project", args=[project.id]))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_it_adds_a_rule_from_the_form(teammate: Any, project: Any) -> None:
    response = login(teammate).post(
        reverse("alerts:rule_new", args=[project.id]),
        {
            "kind": "throttling",
            "threshold": "20",
            "window_minutes": "3",
            "scope_tag": "team=vision",
            "reminder_minutes": "0",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    rule = AlertRule.objects.filter(project=project, kind="throttling").latest("id")
    assert (rule.threshold, rule.window_minutes, rule.scope_tag) == (20, 3, "team=vision")


def test_it_rejects_a_percentage_above_100(owner: Any, project: Any) -> None:
    response = login(owner).post(
        reverse("alerts:rule_new", args=[project.id]),
        {
            "kind": "low_utilization",
            "threshold": "130",
            "window_minutes": "5",
            "reminder_minutes": "60",
            "enabled": "on",
        },
    )
    assert response.status_code == 400
    assert "between 0 and 100" in response.content.decode()


def test_it_adds_a_channel_with_its_own_config_schema(owner: Any, project: Any) -> None:
    client = login(owner)
    bad = client.post(
        reverse("alerts:channel_new", args=[project.id]),
        {"kind": "email", "name": "oncall", "enabled": "on", "config-to": "nope"},
    )
    assert bad.status_code == 400
    good = client.post(
        reverse("alerts:channel_new", args=[project.id]),
        {"kind": "email", "name": "oncall", "enabled": "on", "config-to": "oncall@example.com"},
    )
    assert good.status_code == 302
    assert Channel.objects.get(name="oncall").config == {"to": "oncall@example.com"}


def test_it_queues_a_test_message_from_the_button(
    owner: Any, project: Any, channel: Channel
) -> None:
    response = login(owner).post(reverse("alerts:channel_test", args=[project.id, channel.id]))
    assert response.status_code == 302
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.event is None and delivery.payload["event"] == "test"


def test_it_acknowledges_and_snoozes_from_the_page(
    teammate: Any, project: Any, alert: Alert
) -> None:
    client = login(teammate)
    client.post(reverse("alerts:alert_ack", args=[project.id, alert.id]))
    client.post(reverse("alerts:alert_snooze", args=[project.id, alert.id]), {"minutes": "60"})
    alert.refresh_from_db()
    assert alert.acknowledged_by == teammate
    assert alert.snoozed_until is not None


def test_it_shows_a_channels_attempts_and_its_permanent_error(
    owner: Any, project: Any, channel: Channel
) -> None:
    Channel.objects.filter(id=channel.id).update(last_error="HTTP 404: no such hook")
    response = login(owner).get(reverse("alerts:channel_edit", args=[project.id, channel.id]))
    assert "HTTP 404: no such hook" in response.content.decode()


def test_it_shows_the_runs_alerts_on_its_page_and_alerts_in_the_navigation(
    owner: Any, project: Any, alert: Alert
) -> None:
    alert.why = "input bound: 62% of each step waits on the DataLoader"
    alert.save(update_fields=["why"])
    page = login(owner).get(reverse("dashboard:run", args=[alert.run.run_id])).content.decode()
    assert 'data-testid="alerts-panel"' in page
    assert "GPU at 4%" in page and "Why: input bound" in page
    assert reverse("alerts:project", args=[project.id]) in page
    assert f'href="{reverse("alerts:index")}"' in page  # the nav link, on every page


def test_it_says_so_when_no_alert_fired_on_the_run(owner: Any, project: Any) -> None:
    run = run_create(project=project)
    page = login(owner).get(reverse("dashboard:run", args=[run.run_id])).content.decode()
    assert "No alert has fired on this run." in page
