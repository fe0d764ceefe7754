"""Beat's sweep: which runs are due for a diagnosis (the net under lost messages too)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from perfweb.diagnostics.models import Finding, RunDiagnosis
from perfweb.diagnostics.selectors import runs_due_for_diagnosis
from perfweb.diagnostics.tasks import diagnose_run_task, diagnose_sweep_task
from perfweb.runs.models import Run
from tests.server.agent_client import Agent

from .conftest import input_bound_run, trace_bytes, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(agent: Agent) -> Run:
    input_bound_run(agent)
    return Run.objects.get()


def test_it_diagnoses_a_run_never_diagnosed(run: Run) -> None:
    assert runs_due_for_diagnosis() == [run.id]
    assert diagnose_sweep_task() == 1  # enqueued (and run eagerly in tests)
    assert Finding.objects.filter(run=run).exists()
    assert runs_due_for_diagnosis() == []


def test_it_waits_the_interval_before_diagnosing_a_running_run_again(
    run: Run, agent: Agent, settings: Any
) -> None:
    settings.PERFWEB_DIAGNOSE_INTERVAL = 60
    diagnose_run_task(run.id)
    agent.heartbeat()  # new data
    assert runs_due_for_diagnosis() == []
    assert runs_due_for_diagnosis(now=timezone.now() + timedelta(seconds=61)) == [run.id]


def test_it_diagnoses_a_run_that_ended_since_its_last_diagnosis(run: Run, agent: Agent) -> None:
    diagnose_run_task(run.id)
    assert agent.finish().json()["status"] == "finished"
    assert runs_due_for_diagnosis() == [run.id]
    diagnose_sweep_task()
    assert runs_due_for_diagnosis() == []


def test_it_diagnoses_a_run_with_a_trace_stored_since(run: Run, agent: Agent) -> None:
    diagnose_run_task(run.id)
    RunDiagnosis.objects.filter(run=run).update(data_seen_at=timezone.now() + timedelta(hours=1))
    upload(agent, trace_bytes())  # its on_commit message is lost: never run in this test
    assert runs_due_for_diagnosis() == [run.id]


def test_it_leaves_a_claimed_run_alone(run: Run) -> None:
    RunDiagnosis.objects.create(run=run, claimed_until=timezone.now() + timedelta(minutes=5))
    assert runs_due_for_diagnosis() == []


def test_it_leaves_old_runs_alone(run: Run) -> None:
    assert runs_due_for_diagnosis(now=timezone.now() + timedelta(days=2)) == []


def test_a_sweep_message_for_a_run_no_longer_due_does_nothing(run: Run) -> None:
    diagnose_run_task(run.id)
    diagnosed_at = RunDiagnosis.objects.get(run=run).diagnosed_at
    diagnose_run_task(run.id, only_if_due=True)  # a duplicate from a backlog
    assert RunDiagnosis.objects.get(run=run).diagnosed_at == diagnosed_at
    diagnose_run_task(run.id)  # asked directly (a trace, a verified fix): always diagnoses
    assert RunDiagnosis.objects.get(run=run).diagnosed_at > diagnosed_at
