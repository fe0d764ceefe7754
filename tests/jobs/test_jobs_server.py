"""Jobs on the server: who may start them, the claim, progress, result, cancel and expiry."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from perfweb.jobs import services
from perfweb.jobs.models import FixVerification, Job, JobArm
from perfweb.jobs.selectors import (
    measured_gains_for_run,
    suggested_knobs,
    verified_gains_for_run,
)

RESULT = {
    "baseline_step_s": 0.2, "candidate_step_s": 0.08, "speedup": 2.5, "ci_low": 2.2,
    "ci_high": 2.8, "verdict": "faster", "measured_gain": 0.6, "rounds": 3, "steps_per_arm": 8,
    "loss_parity": {"visible": False, "note": "loss not visible"},
}  # fmt: skip
ARM = {"round": 1, "arm": "baseline", "step_s": [0.2, 0.21], "median_s": 0.205}


def _post(client: Client, path: str, body: dict, token: str) -> Any:
    return client.post(
        path, json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def _job(owner: Any, run: Any, **knobs: Any) -> Job:
    return services.job_create(user=owner, run=run, knobs=knobs or {"num_workers": 2},
                               finding_id="dataloader.num_workers")  # fmt: skip


def _claim(client: Client, token: str, host: str) -> dict:
    reply = _post(client, "/api/v1/jobs/claim", {"host": host, "runner_id": "r1"}, token)
    assert reply.status_code == 200, reply.content
    return reply.json()["job"]


def test_it_lets_a_member_start_a_job_for_the_runs_host(owner: Any, teammate: Any, run: Any):
    job = _job(teammate, run)
    assert job.status == Job.QUEUED and job.host == run.host and job.knobs == {"num_workers": 2}


def test_it_refuses_a_job_from_an_outsider(outsider: Any, run: Any) -> None:
    with pytest.raises(services.NotAllowed):
        _job(outsider, run)


def test_it_refuses_knobs_off_the_closed_list(owner: Any, run: Any) -> None:
    with pytest.raises(services.JobError, match='unknown knob "command"'):
        services.job_create(user=owner, run=run, knobs={"command": "curl x | sh"})


def test_the_claim_hands_out_the_recorded_command_once(owner: Any, run: Any, token: str) -> None:
    job = _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    assert claimed["id"] == job.id and claimed["command"] == ["python", "train.py"]
    assert claimed["cwd"] == "/work/project" and claimed["claim_token"]
    assert _claim(client, token, run.host) is None  # claimed once
    assert Job.objects.get(id=job.id).status == Job.RUNNING


def test_another_host_or_project_gets_nothing(owner: Any, run: Any, token: str, other_token: str):
    _job(owner, run)
    client = Client()
    assert _claim(client, token, "some-other-host") is None
    assert _claim(client, other_token, run.host) is None


def test_progress_result_and_verification(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    base, claim = f"/api/v1/jobs/{claimed['id']}", claimed["claim_token"]
    for _ in range(2):  # a retried post is stored once
        reply = _post(client, f"{base}/progress", {"claim_token": claim, "arm": ARM}, token)
        assert reply.json() == {"ok": True, "cancelled": False}
    assert JobArm.objects.filter(job_id=claimed["id"]).count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        reply = _post(client, f"{base}/result", {"claim_token": claim, "result": RESULT}, token)
    assert reply.status_code == 200, reply.content
    job = Job.objects.get(id=claimed["id"])
    assert job.status == Job.SUCCEEDED and job.speedup == 2.5
    verification = FixVerification.objects.get(run=run, finding_id="dataloader.num_workers")
    assert verification.status == "verified" and verification.measured_gain == 0.6
    gains = measured_gains_for_run(run=run)
    assert gains["dataloader.num_workers"]["measured_gain"] == 0.6
    assert verified_gains_for_run(run=run) == {"dataloader.num_workers": 0.6}


def test_no_measurable_difference_refutes_the_fix(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    result = {**RESULT, "verdict": "no measurable difference", "speedup": 1.0, "ci_low": 0.97,
              "ci_high": 1.03, "measured_gain": 0.0}  # fmt: skip
    body = {"claim_token": claimed["claim_token"], "result": result}
    with django_capture_on_commit_callbacks(execute=True):
        _post(client, f"/api/v1/jobs/{claimed['id']}/result", body, token)
    assert FixVerification.objects.get(run=run).status == "refuted"
    assert verified_gains_for_run(run=run) == {"dataloader.num_workers": 0.0}


def test_a_bad_result_is_rejected_in_one_sentence(owner: Any, run: Any, token: str) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    body = {"claim_token": claimed["claim_token"], "result": {**RESULT, "speedup": "fast"}}
    reply = _post(client, f"/api/v1/jobs/{claimed['id']}/result", body, token)
    assert reply.status_code == 400
    assert reply.json() == {"error": "result.speedup is not a finite number"}
    assert Job.objects.get(id=claimed["id"]).status == Job.RUNNING


def test_a_wrong_claim_token_is_a_conflict(owner: Any, run: Any, token: str) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    body = {"claim_token": "forged", "result": RESULT}
    assert _post(client, f"/api/v1/jobs/{claimed['id']}/result", body, token).status_code == 409


def test_cancel_is_seen_by_the_runner(owner: Any, run: Any, token: str) -> None:
    job = _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    browser = Client()
    browser.force_login(owner)
    assert browser.post(f"/jobs/{job.id}/cancel").status_code == 302
    body = {"claim_token": claimed["claim_token"]}
    assert _post(client, f"/api/v1/jobs/{job.id}/progress", body, token).json()["cancelled"]
    assert Job.objects.get(id=job.id).status == Job.CANCELLED


def test_an_expired_claim_fails_the_job_with_the_reason(owner: Any, run: Any, token: str) -> None:
    job = _job(owner, run)
    claimed = services.job_claim(project=run.project, host=run.host, runner_id="r1")
    assert claimed is not None
    later = timezone.now() + services.claim_ttl() + timedelta(seconds=1)
    assert services.jobs_expire_claims(now=later) == 1
    job.refresh_from_db()
    assert job.status == Job.FAILED and "claim expired" in job.error


def test_try_this_fix_queues_a_job_with_a_concrete_value(owner: Any, run: Any) -> None:
    browser = Client()
    browser.force_login(owner)
    reply = browser.post(
        f"/runs/{run.run_id}/jobs/",
        {"finding_id": "dataloader.num_workers", "knob": "num_workers=N"},
    )
    job = Job.objects.get()
    assert reply.status_code == 302 and reply["Location"] == f"/jobs/{job.id}/"
    assert job.knobs == {"num_workers": 3}  # cores - 1 from the run's facts
    page = browser.get(f"/jobs/{job.id}/")
    assert page.status_code == 200 and b"rounds-chart" in page.content
    state = browser.get(f"/jobs/{job.id}.json").json()
    assert state["status"] == "queued" and state["progress"]["total"] == 10


def test_an_outsider_sees_no_job_and_cannot_start_one(owner: Any, outsider: Any, run: Any):
    job = _job(owner, run)
    browser = Client()
    browser.force_login(outsider)
    assert browser.get(f"/jobs/{job.id}/").status_code == 404
    assert browser.get(f"/jobs/{job.id}.json").status_code == 404
    assert browser.post(f"/runs/{run.run_id}/jobs/", {"knob": "threads=1"}).status_code == 404
    assert Job.objects.count() == 1


def test_suggested_knobs_keep_explicit_values() -> None:
    assert suggested_knobs(finding_id="dataloader.num_workers", knob_text="num_workers=6") == {
        "num_workers": 6
    }
    assert suggested_knobs(finding_id="dataloader.pin_memory", knob_text="pin_memory=true") == {
        "pin_memory": True
    }
    assert suggested_knobs(finding_id="distributed.backend") == {}


def test_the_run_page_shows_the_jobs_panel(owner: Any, run: Any) -> None:
    job = _job(owner, run)
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{run.run_id}/")
    assert page.status_code == 200
    assert b'data-testid="jobs-panel"' in page.content
    assert f'href="/jobs/{job.id}/"'.encode() in page.content
