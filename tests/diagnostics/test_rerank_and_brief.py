"""A verified fix re-ranks the run; the brief an alert quotes; numbers shown with units."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from perfweb.alerts.why import as_payload
from perfweb.diagnostics.formatting import evidence_text, format_value, pct
from perfweb.diagnostics.models import Finding, FixVerification
from perfweb.diagnostics.selectors import finding_for_run
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.diagnostics.verification import fix_verification_record
from perfweb.jobs.models import Job
from perfweb.runs.models import Run
from tests.server.agent_client import Agent

from .conftest import input_bound_run

pytestmark = pytest.mark.django_db
# A job's comparison as the A/B engine stores it, with the loss kept (a training run).
MEASURED = {"loss_parity": {"visible": True, "within_tolerance": True}, "agreement": None}


def test_a_verification_re_ranks_the_run_once_it_commits(
    agent: Agent, owner: Any, django_capture_on_commit_callbacks: Any
) -> None:
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
    result = {
        **MEASURED,
        "verdict": "faster",
        "measured_gain": 0.7,
        "speedup": 3.3,
        "ci_low": 3.0,
        "ci_high": 3.6,
    }
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        verification = fix_verification_record(
            run=run, job_id=job.id, finding_id=job.finding_id, knobs=job.knobs, result=result
        )
    assert len(callbacks) == 1
    assert verification is not None and verification.status == FixVerification.VERIFIED
    top = Finding.objects.get(run=run, rank=1)
    assert (top.rule_id, top.measured_gain, top.score) == ("dataloader.num_workers", 0.7, 0.7)


def test_an_inconclusive_measurement_leaves_the_estimate_in_the_ranking(
    agent: Agent, owner: Any, django_capture_on_commit_callbacks: Any
) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    diagnose_run_task(run.id)
    before = Finding.objects.get(run=run, rule_id="dataloader.num_workers")
    job = Job.objects.create(
        project=run.project,
        run=run,
        host=run.host,
        created_by=owner,
        knobs={"num_workers": 4},
        finding_id="dataloader.num_workers",
    )
    result = {
        **MEASURED,
        "verdict": "inconclusive",
        "measured_gain": -0.05,
        "speedup": 0.95,
        "ci_low": 0.34,
        "ci_high": 1.93,
    }
    with django_capture_on_commit_callbacks(execute=True):
        verification = fix_verification_record(
            run=run, job_id=job.id, finding_id="", knobs=job.knobs, result=result
        )  # the job's single knob names the finding
    assert verification is not None and verification.finding_id == "dataloader.num_workers"
    assert verification.reason == "inconclusive \u2014 more rounds needed"
    after = Finding.objects.get(run=run, rule_id="dataloader.num_workers")
    assert after.measured_gain is None
    assert (after.estimated_gain, after.score, after.rank) == (
        before.estimated_gain,
        before.score,
        before.rank,
    )
    assert after.score > 0
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert "badge-inconclusive" in page and "inconclusive \u2014 more rounds needed" in page
    assert "refuted" not in page


def test_it_gives_alerts_the_top_finding_in_words(agent: Agent) -> None:
    input_bound_run(agent)
    run = Run.objects.get()
    assert finding_for_run(run=run) is None
    diagnose_run_task(run.id)
    top = finding_for_run(run=run)
    assert top is not None and top.id == "dataloader.num_workers"
    assert top.estimated_gain == pytest.approx(0.54, abs=0.01)
    brief = as_payload(top)  # the alert message's `why`
    assert brief is not None
    assert brief["fix_id"] == "dataloader.num_workers"
    assert brief["title"] == "60% of each step waits for the DataLoader"
    assert brief["gain_pct"] == pytest.approx(54, abs=1)
    assert brief["evidence"].startswith(
        "step time waiting on the DataLoader: 60.0 % (metrics (agent step timings)); "
        "num_workers: 0 workers (facts)"
    )
    assert brief["fix"].startswith("Load batches in")


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.123, "fraction", "12.3 %"),
        (3, "workers", "3 workers"),
        (True, "flag", "yes"),
        (0.0123, "s", "12.3 ms"),
        (2.5, "s", "2.5 s"),
        (50161.2, "µs", "50.2 ms"),  # never "50,161 µs"
        (4.1071, "µs", "4.11 µs"),
        (3 * 1024**3, "bytes", "3.0 GiB"),
        (97.0, "%", "97 %"),
        ("nccl", "", "nccl"),
    ],
)
def test_it_shows_numbers_with_their_units(value: Any, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_it_writes_percentages_and_evidence_in_words() -> None:
    assert pct(0.54) == "54.0 %" and pct(-0.02) == "−2.0 %" and pct(None) == "—"
    item = {"label": "num_workers", "value": 0, "unit": "workers", "source": "facts"}
    assert evidence_text(item) == "num_workers: 0 workers (facts)"
