"""diagnose_run on stored data: the agent's stream in, ranked findings out, stored once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from perfweb.diagnostics import services
from perfweb.diagnostics.evidence import run_evidence
from perfweb.diagnostics.models import Finding, FixVerification, RunDiagnosis
from perfweb.diagnostics.selectors import finding_top_for_run
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.jobs.models import Job
from perfweb.runs.models import Run
from tests.server.agent_client import Agent

from .conftest import input_bound_run, stream_steps

pytestmark = pytest.mark.django_db


def rows(run: Run) -> list[tuple[Any, ...]]:
    return list(
        Finding.objects.filter(run=run)
        .order_by("rank")
        .values_list("id", "rule_id", "rank", "score", "title", "evidence", "fix", "updated_at")
    )


def test_it_names_the_dataloader_first_for_an_input_bound_run(agent: Agent) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    diagnose_run_task(run.id)
    top = Finding.objects.filter(run=run).order_by("rank").first()
    assert top is not None and top.rule_id == "dataloader.num_workers"
    assert top.rank == 1 and top.risk == "data-path"
    assert top.estimated_gain == pytest.approx(0.6 * 0.9, abs=0.01)
    assert "Amdahl" in top.gain_basis
    assert top.fix["knob"].startswith("num_workers=")
    assert top.fix["snippet"]
    assert {
        "label": "num_workers",
        "value": 0,
        "unit": "workers",
        "source": "facts",
    } in top.evidence
    assert top.doc.startswith("What:") and "Why:" in top.doc and "Fix:" in top.doc
    assert finding_top_for_run(run=run) == top
    state = RunDiagnosis.objects.get(run=run)
    assert state.diagnosed_at is not None and state.claimed_until is None and state.error == ""


def test_it_reads_the_stored_steps_and_facts_as_the_agent_sent_them(agent: Agent) -> None:
    input_bound_run(agent, steps=40)
    evidence = run_evidence(run=Run.objects.get())
    assert len(evidence.steps) == 40
    assert {s.rank for s in evidence.steps} == {0}
    assert [s.index for s in evidence.steps] == list(range(40))
    assert evidence.steps[5].duration_s == pytest.approx(0.1)
    assert evidence.steps[5].data_wait_s == pytest.approx(0.06)
    assert evidence.facts["dataloader.0.num_workers"] == 0
    assert evidence.devices[0]["key"] == "gpu:0" and evidence.devices[0]["memory_total"] > 0
    assert evidence.world_size == 1
    assert {(s.device, s.name) for s in evidence.series} >= {("process", "process.cpu_percent")}


def test_it_reads_a_bounded_window_of_a_long_run(agent: Agent, settings: Any) -> None:
    settings.PERFWEB_DIAGNOSE_WINDOW = 60.0
    input_bound_run(agent, steps=300, step_s=1.0, per_batch=100)
    evidence = run_evidence(run=Run.objects.get())
    assert 55 <= len(evidence.steps) <= 62  # the last minute of steps, not all 300
    assert all(len(s.t) <= 62 for s in evidence.series)


def test_it_is_safe_to_run_twice(agent: Agent) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    diagnose_run_task(run.id)
    first = rows(run)
    diagnose_run_task(run.id)
    assert rows(run) == first  # same rows, same ids, not even rewritten
    assert Finding.objects.filter(run=run).count() == len(first) >= 1


def test_it_removes_findings_that_no_longer_fire(agent: Agent) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    diagnose_run_task(run.id)
    assert Finding.objects.filter(run=run, rule_id="dataloader.num_workers").exists()
    # the loop stops waiting: the latest window of steps is healthy
    stream_steps(
        agent,
        steps=400,
        wait_share=0.0,
        start=run.started_at.timestamp() + 100,
        facts={"dataloader.0.num_workers": 4},
    )
    diagnose_run_task(run.id)
    assert not Finding.objects.filter(run=run, rule_id="dataloader.num_workers").exists()


def test_it_skips_a_run_that_another_worker_is_diagnosing(agent: Agent) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    RunDiagnosis.objects.create(run=run, claimed_until=timezone.now() + timedelta(minutes=5))
    assert services.diagnose_run(run=run) is None
    assert not Finding.objects.filter(run=run).exists()


def test_it_takes_over_an_expired_claim(agent: Agent) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    RunDiagnosis.objects.create(run=run, claimed_until=timezone.now() - timedelta(seconds=1))
    assert services.diagnose_run(run=run)
    assert Finding.objects.filter(run=run).exists()


def test_it_ranks_a_verified_fix_by_its_measured_gain(agent: Agent, owner: Any) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    diagnose_run_task(run.id)
    job = Job.objects.create(
        project=run.project,
        run=run,
        host=run.host,
        created_by=owner,
        knobs={"num_workers": 4},
        finding_id="dataloader.num_workers",
    )
    FixVerification.objects.create(
        run=run,
        finding_id="dataloader.num_workers",
        job=job,
        status="refuted",
        measured_gain=0.0,
        speedup=1.0,
        ci_low=0.97,
        ci_high=1.03,
    )
    diagnose_run_task(run.id)
    refuted = Finding.objects.get(run=run, rule_id="dataloader.num_workers")
    assert refuted.measured_gain == 0.0
    assert refuted.score == 0.0
    assert refuted.rank == Finding.objects.filter(run=run).count()  # last


def test_it_ignores_a_deleted_run() -> None:
    diagnose_run_task(123456)  # no error
