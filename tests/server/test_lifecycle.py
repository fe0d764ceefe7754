"""Run lifecycle: finished, failed with its exit code, lost after silence, running again.

Runs against SQLite here and against PostgreSQL through test_postgresql.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from perfweb.runs.models import Run, RunProcess
from perfweb.runs.services import runs_mark_lost
from perfweb.runs.tasks import sweep_lost_runs_task
from perfweb.series.models import Chunk

from .agent_client import T0, Agent

pytestmark = pytest.mark.django_db


def silence(seconds: float) -> None:
    Run.objects.update(last_seen_at=timezone.now() - timedelta(seconds=seconds))


def test_it_finishes_a_run_that_exits_cleanly(started: Agent) -> None:
    response = started.finish(exit_code=0)
    assert response.status_code == 200
    assert response.json()["status"] == "finished"
    run = Run.objects.get()
    assert (run.status, run.exit_code) == ("finished", 0)
    assert run.ended_at is not None and run.ended_at.timestamp() == T0 + 3600


def test_it_fails_a_run_with_its_exit_code(started: Agent) -> None:
    started.finish(exit_code=3)
    run = Run.objects.get()
    assert (run.status, run.exit_code) == ("failed", 3)


def test_it_keeps_the_first_final_finish(started: Agent) -> None:
    started.finish(exit_code=0)
    assert started.finish(exit_code=1).status_code == 200
    assert (Run.objects.get().status, Run.objects.get().exit_code) == ("finished", 0)


def test_it_ends_only_the_process_on_a_non_final_finish(started: Agent) -> None:
    started.finish(exit_code=0, final=False)
    assert Run.objects.get().status == "running"
    process = RunProcess.objects.get()
    assert process.ended_at is not None and process.exit_code == 0


def test_it_compacts_the_run_when_it_ends(
    started: Agent, django_capture_on_commit_callbacks: object
) -> None:
    for _ in range(3):
        started.batch()
    assert Chunk.objects.count() == 12
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        started.finish(exit_code=0)
    assert Chunk.objects.count() == 4  # one per series


def test_it_marks_a_silent_run_lost(started: Agent, settings: object) -> None:
    silence(121)
    assert sweep_lost_runs_task() == 1
    assert Run.objects.get().status == "lost"


def test_it_leaves_a_run_that_reported_recently(started: Agent) -> None:
    silence(119)
    assert runs_mark_lost(silent_for=120) == 0
    assert Run.objects.get().status == "running"


def test_it_honours_the_lost_after_setting(started: Agent, settings: object) -> None:
    settings.PERFWEB_LOST_AFTER = 10  # type: ignore[attr-defined]
    silence(11)
    sweep_lost_runs_task()
    assert Run.objects.get().status == "lost"


def test_it_never_marks_an_ended_run_lost(started: Agent) -> None:
    started.finish(exit_code=0)
    silence(10_000)
    runs_mark_lost(silent_for=120)
    assert Run.objects.get().status == "finished"


@pytest.mark.parametrize("sign_of_life", ["batch", "heartbeat", "start"])
def test_it_revives_a_lost_run_that_reports_again(started: Agent, sign_of_life: str) -> None:
    silence(1000)
    runs_mark_lost(silent_for=120)
    getattr(started, sign_of_life)()
    assert Run.objects.get().status == "running"


def test_it_keeps_a_finished_run_finished_when_a_late_batch_arrives(started: Agent) -> None:
    started.finish(exit_code=0)
    assert started.batch().status_code == 200
    assert Run.objects.get().status == "finished"


def test_it_keeps_what_the_agent_says_it_produced(started: Agent) -> None:
    body = {
        "run_id": started.run_id,
        "agent_id": started.agent_id,
        "exit_code": 0,
        "final": True,
        "produced": {"samples": 20, "steps": 2, "dropped": 0},
    }
    assert started.post("finish", body).status_code == 200
    assert RunProcess.objects.get().produced == {"samples": 20, "steps": 2, "dropped": 0}
    body["produced"] = {"samples": -1}
    response = started.post("finish", body)
    assert response.status_code == 400
    assert response.json()["error"] == "produced.samples is less than 0"


def say_finish_unsent(agent: Agent, **unsent: object) -> Any:
    """The heartbeat an agent sends at exit when its finish stays in the spill directory."""
    body = {
        "run_id": agent.run_id,
        "agent_id": agent.agent_id,
        "sent_at": T0 + 3600,
        "unsent": {"requests": 3, "exit_code": 7, "final": True, **unsent},
    }
    return agent.post("heartbeat", body)


def test_it_waits_for_a_finish_its_agent_kept_on_the_host(started: Agent) -> None:
    assert say_finish_unsent(started).status_code == 200
    silence(10_000)
    assert sweep_lost_runs_task() == 0
    run = Run.objects.get()
    assert run.status == "running" and run.exit_code is None
    process = RunProcess.objects.get()
    assert process.unsent_at is not None and process.exit_code == 7  # what its finish says
    assert started.finish(exit_code=7).status_code == 200  # replayed from the spill, later
    assert (Run.objects.get().status, Run.objects.get().exit_code) == ("failed", 7)


def test_it_marks_lost_a_run_whose_kept_finish_never_came(started: Agent, settings: object) -> None:
    settings.PERFWEB_UNSENT_WAIT = 3600  # type: ignore[attr-defined]
    say_finish_unsent(started)
    silence(10_000)
    RunProcess.objects.update(unsent_at=timezone.now() - timedelta(seconds=3601))
    assert sweep_lost_runs_task() == 1
    assert Run.objects.get().status == "lost"
    assert started.finish(exit_code=7).status_code == 200  # `perf-agent upload`, days later
    assert (Run.objects.get().status, Run.objects.get().exit_code) == ("failed", 7)


def test_a_finish_that_arrived_is_not_waited_for_again(started: Agent) -> None:
    started.finish(exit_code=0, final=False)  # the in-flight finish got there after all
    say_finish_unsent(started, final=False, exit_code=0)
    silence(10_000)
    assert sweep_lost_runs_task() == 1  # nothing more will come: the usual silence rule
    assert RunProcess.objects.get().unsent_at is None


@pytest.mark.parametrize(
    ("unsent", "error"),
    [
        ([], "unsent is not an object"),
        ({"exit_code": 7}, "unsent.requests is missing"),
        ({"requests": 0}, "unsent.requests is less than 1"),
        ({"requests": 2, "exit_code": 2**31}, "unsent.exit_code is not a 32-bit integer"),
        ({"requests": 2, "final": "yes"}, "unsent.final is not true or false"),
    ],
)
def test_it_refuses_a_malformed_unsent_and_stores_nothing(
    started: Agent, unsent: object, error: str
) -> None:
    body = {"run_id": started.run_id, "agent_id": started.agent_id, "unsent": unsent}
    response = started.post("heartbeat", body)
    assert (response.status_code, response.json()["error"]) == (400, error)
    assert RunProcess.objects.get().unsent_at is None
