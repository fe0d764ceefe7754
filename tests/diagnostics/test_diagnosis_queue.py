"""Diagnosis requests coalesce and projects take turns (issue 27): a flood of traces in one
run is one pending diagnosis; one project's many runs cannot fill the queue ahead of another
project's; what a request not sent asked for is found by beat's sweep. The messages are
Celery's own, published to an in-memory broker (no worker takes them unless a test does)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from perfweb.diagnostics import services
from perfweb.diagnostics.models import RunDiagnosis
from perfweb.diagnostics.selectors import runs_due_for_diagnosis
from perfweb.diagnostics.tasks import diagnose_run_task, diagnose_sweep_task
from perfweb.runs.models import Run
from perfweb_agent.delivery.traces import chunk_bodies
from tests.server.agent_client import Agent

pytestmark = pytest.mark.django_db
DIAGNOSE = "perfweb.diagnostics.tasks.diagnose_run_task"


@pytest.fixture
def published() -> Iterator[list[tuple[Any, ...]]]:
    """(run id, only_if_due) of every diagnosis message sent, as Celery publishes them
    (eager mode off, an in-memory broker)."""
    from celery.signals import after_task_publish

    from perfweb.celery import app

    sent: list[tuple[Any, ...]] = []

    def seen(sender: str | None = None, body: Any = None, **kwargs: Any) -> None:
        if sender == DIAGNOSE:
            args, kwargs, _ = body
            sent.append((*args, kwargs.get("only_if_due", False)))

    broker = app.conf.broker_url
    app.conf.update(task_always_eager=False, broker_url="memory://")
    app._pool = None  # the next publish connects to the memory broker
    after_task_publish.connect(seen, weak=False)
    try:
        with app.connection_for_write() as connection:
            assert connection.transport.driver_type == "memory"
        yield sent
    finally:
        after_task_publish.disconnect(seen)
        app.conf.update(task_always_eager=True, broker_url=broker)
        app._pool = None


def finished_trace(agent: Agent, name: str) -> None:
    data = gzip.compress(json.dumps({"traceEvents": [], "name": name}).encode(), mtime=0)
    reply = agent.post("trace", chunk_bodies(agent.run_id, agent.agent_id, name, data)[0])
    assert reply.json()["complete"] is True, reply.content


def test_a_flood_of_traces_in_one_run_is_one_pending_diagnosis(
    started: Agent, published: list[tuple[Any, ...]], django_capture_on_commit_callbacks: Any
) -> None:
    run = Run.objects.get(run_id=started.run_id)
    for number in range(20):
        with django_capture_on_commit_callbacks(execute=True):
            finished_trace(started, f"w{number}")
    assert published == [(run.pk, False)]  # one, not 20
    diagnose_run_task(run.pk)  # a worker takes it
    assert RunDiagnosis.objects.get(run=run).queued_at is None
    with django_capture_on_commit_callbacks(execute=True):
        finished_trace(started, "after")  # it may not have seen this one: a new message
    assert published == [(run.pk, False)] * 2


def a_run(project: Any, number: int, *, seen_ago_s: float = 0) -> Run:
    seen = timezone.now() - timedelta(seconds=seen_ago_s)
    return Run.objects.create(
        project=project,
        run_id=f"{project.name}-run-{number:04d}",
        name="r",
        status=Run.RUNNING,
        started_at=seen,
        last_seen_at=seen,
    )


def test_one_projects_flood_cannot_starve_another_projects_diagnoses(
    project: Any, other_project: Any, published: list[tuple[Any, ...]], settings: Any
) -> None:
    settings.PERFWEB_DIAGNOSE_PROJECT_PENDING = 3
    flood = [a_run(project, n) for n in range(10)]
    sent = [services.diagnosis_enqueue(run_pk=run.pk) for run in flood]
    assert sent == [True] * 3 + [False] * 7
    other = a_run(other_project, 0)
    assert services.diagnosis_enqueue(run_pk=other.pk) is True  # not behind the flood
    assert published == [(run.pk, False) for run in flood[:3]] + [(other.pk, False)]
    diagnose_run_task(flood[0].pk)  # a worker takes one: the project has a free turn
    assert services.diagnosis_enqueue(run_pk=flood[3].pk) is True
    # A lost message's mark runs out: the run can be asked for again.
    RunDiagnosis.objects.filter(run=flood[1]).update(queued_at=timezone.now() - timedelta(hours=1))
    assert services.diagnosis_enqueue(run_pk=flood[1].pk) is True


def test_the_sweep_takes_the_projects_in_turn_and_sends_no_second_message(
    project: Any, other_project: Any, published: list[tuple[Any, ...]], settings: Any
) -> None:
    flood = [a_run(project, n, seen_ago_s=100 - n) for n in range(5)]  # waiting longest
    other = a_run(other_project, 0)
    assert runs_due_for_diagnosis(limit=3) == [flood[0].pk, other.pk, flood[1].pk]
    assert diagnose_sweep_task() == 6
    assert diagnose_sweep_task() == 0  # each run has its pending message
    assert sorted(published) == sorted((run.pk, True) for run in [*flood, other])
