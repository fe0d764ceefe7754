"""The state machine: ok → firing → resolved, every change a row, each notified once."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from perfweb.alerts import services
from perfweb.alerts.evaluation import alerts_evaluate
from perfweb.alerts.models import Alert, AlertEvent, AlertRule, Delivery
from perfweb.alerts.notify import event_store
from perfweb.runs.models import Run
from perfweb_recommender.thresholds import GIB
from tests.alerts.conftest import run_create, samples_add

pytestmark = pytest.mark.django_db


@pytest.fixture
def low_util_only(project: Any) -> AlertRule:
    """The project's default low-utilisation rule, the others switched off."""
    AlertRule.objects.filter(project=project).exclude(kind="low_utilization").update(enabled=False)
    return AlertRule.objects.get(project=project, kind="low_utilization")


@pytest.fixture
def channel(project: Any) -> Any:
    return services.channel_create(
        project=project, kind="webhook", name="hook", config={"url": "http://127.0.0.1:9/hook"}
    )


def tick(seconds_later: float = 0.0) -> list[int]:
    return alerts_evaluate(now=timezone.now() + timedelta(seconds=seconds_later)).events


def test_it_creates_the_default_rules_for_a_new_project(project: Any) -> None:
    rules = {r.kind: r for r in AlertRule.objects.filter(project=project)}
    assert rules["low_utilization"].enabled
    assert (rules["low_utilization"].threshold, rules["low_utilization"].window_minutes) == (30, 5)
    assert set(rules) == {
        "low_utilization",
        "idle_memory_held",
        "stalled",
        "throttling",
        "step_regression",
        "finding_gain",
    }


def test_it_fires_once_and_resolves_once(
    project: Any, low_util_only: AlertRule, channel: Any
) -> None:
    run = run_create(project=project)
    now = time.time()
    samples_add(run=run, name="gpu.utilization", values=5.0, end=now, seconds=300)

    assert len(tick()) == 1
    assert tick() == []  # still firing: no new change, no new message
    alert = Alert.objects.get(run=run)
    assert alert.state == Alert.FIRING
    firing = AlertEvent.objects.get(alert=alert)
    assert (firing.kind, firing.from_state, firing.to_state) == ("firing", "ok", "firing")
    assert Delivery.objects.filter(event=firing, channel=channel).count() == 1
    assert firing.payload["run"]["name"] == "resnet50"
    assert firing.payload["numbers"]["mean_utilization"] == 5.0
    assert firing.payload["why"]["fix_id"] == "gpu.low_utilization"

    samples_add(run=run, name="gpu.utilization", values=95.0, end=now + 300, seconds=299)
    assert len(tick(seconds_later=300)) == 1
    alert.refresh_from_db()
    assert alert.state == Alert.RESOLVED
    events = AlertEvent.objects.filter(alert=alert).order_by("at")
    kinds = list(events.values_list("kind", flat=True))
    assert kinds == ["firing", "resolved"]
    assert Delivery.objects.count() == 2


def test_it_stores_one_change_when_two_evaluations_race(
    project: Any, low_util_only: AlertRule, channel: Any
) -> None:
    run = run_create(project=project)
    first_read = Alert.objects.create(rule=low_util_only, run=run)
    second_read = Alert.objects.get(id=first_read.id)  # both evaluations saw "ok"
    moves = [
        event_store(
            alert=read,
            kind="firing",
            to_state=Alert.FIRING,
            summary="low",
            numbers={},
            finding=None,
            now=timezone.now(),
        )
        for read in (first_read, second_read)
    ]
    assert moves[0] is not None and moves[1] is None
    assert AlertEvent.objects.count() == 1
    assert Delivery.objects.count() == 1


def test_it_leaves_no_row_for_runs_that_never_fired(project: Any, low_util_only: AlertRule) -> None:
    run = run_create(project=project)
    samples_add(run=run, name="gpu.utilization", values=90.0, end=time.time(), seconds=300)
    assert tick() == []
    assert not Alert.objects.exists()


def test_it_only_watches_runs_with_the_rules_tag(project: Any, low_util_only: AlertRule) -> None:
    services.rule_update(rule=low_util_only, scope_tag="team=vision")
    tagged = run_create(project=project, run_id="run-tagged-01", tags={"team": "vision"})
    other = run_create(project=project, run_id="run-other-001", tags={"team": "speech"})
    for run in (tagged, other):
        samples_add(run=run, name="gpu.utilization", values=1.0, end=time.time(), seconds=300)
    tick()
    assert list(Alert.objects.values_list("run__run_id", flat=True)) == ["run-tagged-01"]


def test_it_resolves_when_the_run_ends(project: Any, low_util_only: AlertRule) -> None:
    run = run_create(project=project)
    samples_add(run=run, name="gpu.utilization", values=1.0, end=time.time(), seconds=300)
    tick()
    Run.objects.filter(id=run.id).update(status=Run.FINISHED)
    tick()
    event = AlertEvent.objects.order_by("-at").first()
    assert (event.kind, event.summary) == ("resolved", "run finished")


def test_it_reminds_while_firing_until_acknowledged(
    project: Any, owner: Any, low_util_only: AlertRule
) -> None:
    services.rule_update(rule=low_util_only, reminder_minutes=10)
    run = run_create(project=project)
    samples_add(run=run, name="gpu.utilization", values=1.0, end=time.time(), seconds=300)
    tick()
    assert tick(seconds_later=5 * 60) == []  # too early
    reminders = alerts_evaluate(now=timezone.now() + timedelta(minutes=11)).events
    assert AlertEvent.objects.get(id=reminders[0]).kind == "reminder"
    assert services.alert_acknowledge(alert=Alert.objects.get(run=run), user=owner)
    assert tick(seconds_later=30 * 60) == []


def test_it_stores_but_does_not_send_while_snoozed(
    project: Any, channel: Any, low_util_only: AlertRule
) -> None:
    run = run_create(project=project)
    alert = Alert.objects.create(rule=low_util_only, run=run)
    services.alert_snooze(alert=alert, minutes=60)
    samples_add(run=run, name="gpu.utilization", values=1.0, end=time.time(), seconds=300)
    tick()
    event = AlertEvent.objects.get(alert=alert)
    assert event.suppressed
    assert not Delivery.objects.exists()


def test_it_fires_idle_memory_held_with_the_why(project: Any, channel: Any) -> None:
    AlertRule.objects.filter(project=project).exclude(kind="idle_memory_held").update(enabled=False)
    run = run_create(project=project)
    now = time.time()
    samples_add(run=run, name="gpu.utilization", values=0.0, end=now, seconds=600)
    samples_add(run=run, name="gpu.memory_used", values=40 * GIB, end=now, seconds=600)
    tick()
    event = AlertEvent.objects.get()
    assert "holding 40 GiB" in event.summary
    assert event.payload["why"]["fix_id"] == "gpu.idle_memory_held"
    assert Alert.objects.get().why.startswith("idle GPU holding memory")


def test_it_says_input_bound_when_the_loop_waits_on_data(
    project: Any, channel: Any, low_util_only: AlertRule
) -> None:
    run = run_create(project=project, steps=300)
    now = time.time()
    samples_add(run=run, name="gpu.utilization", values=10.0, end=now, seconds=300)
    samples_add(run=run, name="step.duration", values=0.5, end=now, seconds=300, device="rank:0")
    samples_add(run=run, name="step.data_wait", values=0.4, end=now, seconds=300, device="rank:0")
    tick()
    why = AlertEvent.objects.get().payload["why"]
    assert why["fix_id"] == "dataloader.num_workers"
    # The rule's own finding: 80% of each step waits, 90% of that recoverable by workers.
    assert why["gain_pct"] == 72.0
    assert why["title"] == "80% of each step waits for the DataLoader"


def test_it_fires_stalled_for_a_run_whose_steps_stopped(project: Any) -> None:
    AlertRule.objects.filter(project=project).exclude(kind="stalled").update(enabled=False)
    run = run_create(project=project, steps=100)
    samples_add(
        run=run,
        name="step.duration",
        values=0.5,
        end=time.time() - 1200,
        seconds=100,
        device="rank:0",
    )
    tick()
    assert "last step 20 min ago" in AlertEvent.objects.get().summary


def test_it_gives_projects_from_before_the_alerts_app_their_default_rules(owner: Any) -> None:
    from importlib import import_module

    from django.apps import apps

    from perfweb.projects.models import Project

    old = Project.objects.create(name="legacy")
    AlertRule.objects.filter(project=old).delete()  # as if created before the app existed
    import_module(
        "perfweb.alerts.migrations.0002_default_rules_for_existing_projects"
    ).add_defaults(apps, None)
    rules = AlertRule.objects.filter(project=old)
    assert rules.filter(
        kind="low_utilization", enabled=True, threshold=30, window_minutes=5
    ).exists()
    assert rules.count() == 6


def stored_finding(run: Run, *, rule_id: str, gain: float) -> None:
    from perfweb.diagnostics.models import Finding

    Finding.objects.create(
        run=run,
        rule_id=rule_id,
        rank=1,
        score=gain,
        title="input bound",
        risk="data-path",
        confidence=0.9,
        estimated_gain=gain,
        fix={"text": "raise num_workers to 8"},
    )


def test_it_quotes_the_runs_top_stored_finding_as_the_why(
    project: Any, channel: Any, low_util_only: AlertRule
) -> None:
    run = run_create(project=project)
    stored_finding(run, rule_id="dataloader.num_workers", gain=0.41)
    samples_add(run=run, name="gpu.utilization", values=10.0, end=time.time(), seconds=300)
    tick()
    why = AlertEvent.objects.get().payload["why"]
    assert (why["fix_id"], why["gain_pct"], why["fix"]) == (
        "dataloader.num_workers",
        41.0,
        "raise num_workers to 8",
    )


def test_it_keeps_the_system_diagnosis_for_an_idle_gpu_holding_memory(
    project: Any, channel: Any
) -> None:
    AlertRule.objects.filter(project=project).exclude(kind="idle_memory_held").update(enabled=False)
    run = run_create(project=project)
    stored_finding(run, rule_id="dataloader.num_workers", gain=0.41)
    now = time.time()
    samples_add(run=run, name="gpu.utilization", values=0.0, end=now, seconds=600)
    samples_add(run=run, name="gpu.memory_used", values=40 * GIB, end=now, seconds=600)
    tick()
    assert AlertEvent.objects.get().payload["why"]["fix_id"] == "gpu.idle_memory_held"


def test_a_low_utilisation_alert_says_how_many_gpu_hours_the_run_has_used_and_wasted(
    project: Any, low_util_only: AlertRule, channel: Any
) -> None:
    from perfweb.alerts.messages import text_lines
    from perfweb.fleet.services import gpu_price_set

    gpu_price_set(project=project, model="*", price="3.6")
    run = run_create(project=project)  # started an hour ago
    samples_add(run=run, name="gpu.utilization", values=5.0, end=time.time(), seconds=300)
    assert len(tick()) == 1
    waste = AlertEvent.objects.get().payload["waste"]
    hours = waste["gpu_hours"]
    assert hours["low_utilization"] == pytest.approx(300 / 3600, abs=2 / 3600)
    assert hours["busy"] == 0 and hours["total"] == pytest.approx(1.0, abs=0.01)
    assert hours["unattributed"] == pytest.approx(3300 / 3600, abs=0.01)  # no samples before
    assert waste["wasted_cost"] == pytest.approx(3.6 * 300 / 3600, abs=0.01)
    line = next(x for x in text_lines(AlertEvent.objects.get().payload) if "GPU-hours" in x)
    assert line.startswith("GPU-hours so far: 1.00 (0.08 low utilisation, 0.00 idle holding")


def test_the_step_regression_rule_fires_on_a_regression_against_the_jobs_baseline(
    project: Any,
) -> None:
    from perfweb.diagnostics.models import Finding

    AlertRule.objects.filter(project=project).exclude(kind="step_regression").update(enabled=False)
    AlertRule.objects.filter(project=project, kind="step_regression").update(enabled=True)
    run = run_create(project=project)
    now = time.time()
    samples_add(run=run, name="step.duration", values=0.5, end=now, seconds=300, device="rank:0")
    assert tick() == []  # steady within the run, and no cross-run regression yet
    Finding.objects.create(
        run=run,
        rule_id="run.regression",
        rank=1,
        score=0.1,
        title="Regressed vs run abc: 12%",
        risk="system",
        confidence=0.8,
        estimated_gain=0.1,
    )
    assert len(tick()) == 1
    firing = AlertEvent.objects.get(alert__run=run)
    assert firing.summary.startswith("Regressed vs run abc")
