"""Jobs on the server: who may start them, the claim, progress, result, cancel and expiry."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from perfweb.diagnostics.fix_knobs import fix_knobs
from perfweb.diagnostics.gains import measured_gains_for_run, verified_gains_for_run
from perfweb.diagnostics.models import Finding, FixVerification
from perfweb.jobs import services
from perfweb.jobs.models import Job, JobArm
from perfweb.jobs.selectors import results_check

# What a forger posts: the server must never take these numbers.
FORGED = {
    "baseline_step_s": 0.2, "candidate_step_s": 0.002, "speedup": 100, "ci_low": 99,
    "ci_high": 101, "verdict": "faster", "measured_gain": 0.99, "rounds": 5, "steps_per_arm": 8,
    "loss_parity": {"visible": False, "note": "loss not visible"},
}  # fmt: skip


def _steps(mean: float, spread: float, n: int = 8) -> list[float]:
    """n step times around `mean`, evenly spread over +-`spread` (relative)."""
    return [mean * (1 - spread + 2 * spread * i / (n - 1)) for i in range(n)]


# Round 1's baseline as a runner posts it: its steps, warm-up included, as `_post_rounds` sends
ARM = {"round": 1, "arm": "baseline", "step_s": _steps(0.2, 0.02), "median_s": 0.2}


def _post_rounds(
    client: Client,
    claimed: dict,
    token: str,
    *,
    base_s: float,
    cand_s: float,
    spread: float = 0.02,
    rounds: int = 5,
    loss: bool = True,
) -> None:
    """The rounds as a runner posts a training job's: step times and (unless `loss` is
    False) the per-step losses, the same in both arms."""
    for number in range(1, rounds + 1):
        for arm, mean in (("baseline", base_s), ("candidate", cand_s)):
            steps = _steps(mean, spread)
            body = {
                "claim_token": claimed["claim_token"],
                "arm": {
                    "round": number,
                    "arm": arm,
                    "step_s": steps,
                    "kind": "training",
                    "loss": [0.7] * len(steps) if loss else None,
                },
            }
            reply = _post(client, f"/api/v1/jobs/{claimed['id']}/progress", body, token)
            assert reply.status_code == 200, reply.content


def _finish(client: Client, claimed: dict, token: str, result: dict | None = None) -> Any:
    body = {"claim_token": claimed["claim_token"], "result": result or FORGED}
    return _post(client, f"/api/v1/jobs/{claimed['id']}/result", body, token)


def _post(client: Client, path: str, body: dict, token: str) -> Any:
    return client.post(
        path,
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def _job(owner: Any, run: Any, **knobs: Any) -> Job:
    return services.job_create(
        user=owner, run=run, knobs=knobs or {"num_workers": 2}, finding_id="dataloader.num_workers"
    )


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
    browser = Client()
    browser.force_login(owner)
    body = {"knobs": {"command": "curl x | sh"}}
    reply = browser.post(f"/runs/{run.run_id}/jobs.json", body, content_type="application/json")
    assert reply.status_code == 400 and 'unknown knob "command"' in reply.json()["error"]
    assert not Job.objects.exists()


def test_the_claim_hands_out_the_recorded_command_once(owner: Any, run: Any, token: str) -> None:
    job = _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    assert claimed["id"] == job.id and claimed["command"] == ["python", "train.py"]
    assert claimed["cwd"] == "/work/project" and claimed["claim_token"]
    assert _claim(client, token, run.host) is None  # claimed once
    assert Job.objects.get(id=job.id).status == Job.RUNNING


def test_it_stores_only_the_hash_of_the_claim_secret(owner: Any, run: Any, token: str) -> None:
    job = _job(owner, run)
    claimed = _claim(Client(), token, run.host)
    stored = Job.objects.get(id=job.id).claim_token
    assert claimed["claim_token"] not in stored and len(claimed["claim_token"]) >= 32
    assert stored == services.claim_digest(claimed["claim_token"])
    body = {"claim_token": stored}  # a database dump's copy is not the secret
    reply = _post(Client(), f"/api/v1/jobs/{job.id}/progress", body, token)
    assert reply.status_code == 409


def test_a_host_no_agent_of_the_project_recorded_cannot_claim(
    owner: Any, run: Any, token: str, other_token: str
) -> None:
    job = _job(owner, run)
    client = Client()
    reply = _post(
        client, "/api/v1/jobs/claim", {"host": "some-other-host", "runner_id": "r"}, token
    )
    assert reply.status_code == 403
    assert reply.json() == {
        "error": "no agent of this project recorded a run on host 'some-other-host'"
    }
    other = _post(client, "/api/v1/jobs/claim", {"host": run.host, "runner_id": "r"}, other_token)
    assert other.status_code == 403  # the other project never recorded this host
    assert Job.objects.get(id=job.id).status == Job.QUEUED


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
    _post_rounds(client, claimed, token, base_s=0.2, cand_s=0.08)
    with django_capture_on_commit_callbacks(execute=True):
        reply = _finish(client, claimed, token)
    assert reply.status_code == 200, reply.content
    job = Job.objects.get(id=claimed["id"])
    assert job.status == Job.SUCCEEDED and job.verdict == "faster"
    # The rounds agree exactly; the interval is the steps' own +-2% noise at the 16 looks a
    # job of 5 rounds, up to 20, may take.
    assert job.speedup == pytest.approx(2.5) and 2.35 < job.ci_low < 2.5 < job.ci_high < 2.65
    assert job.result["speedup"] == job.speedup and job.result["rounds"] == 5
    assert job.stop_reason == "stopped after 5 rounds: the interval decided (faster)"
    verification = FixVerification.objects.get(run=run, finding_id="dataloader.num_workers")
    assert verification.status == "verified"
    assert verification.measured_gain == pytest.approx(0.6)
    gains = measured_gains_for_run(run=run)
    assert gains["dataloader.num_workers"]["measured_gain"] == pytest.approx(0.6)
    assert verified_gains_for_run(run=run) == {"dataloader.num_workers": pytest.approx(0.6)}


def test_a_faster_training_result_without_loss_parity_is_not_verified(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.2, cand_s=0.08, loss=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert _finish(client, claimed, token).json()["verdict"] == "faster"  # the speed is
    verification = FixVerification.objects.get(run=run, finding_id="dataloader.num_workers")
    assert verification.status == "inconclusive"
    assert verification.reason == (
        "faster, not verified: the loss was not seen in both arms, so its parity is unknown"
    )
    assert verified_gains_for_run(run=run) == {}  # the finding keeps its estimate
    job = Job.objects.get(id=claimed["id"])
    assert results_check(job=job).endswith(
        "Not verified: the loss was not seen in both arms, so its parity is unknown."
    )


def test_a_forged_result_is_recomputed_from_the_arms(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.1)  # the knob did nothing
    with django_capture_on_commit_callbacks(execute=True):
        reply = _finish(client, claimed, token, FORGED)  # ...but the post says 100x faster
    assert reply.status_code == 200 and reply.json()["verdict"] == "no measurable difference"
    job = Job.objects.get(id=claimed["id"])
    assert job.speedup == pytest.approx(1.0) and job.result["measured_gain"] == pytest.approx(0)
    assert FixVerification.objects.get(run=run).status == "refuted"
    assert verified_gains_for_run(run=run) == {"dataloader.num_workers": 0.0}


def test_a_result_before_the_rounds_is_rejected_in_one_sentence(
    owner: Any, run: Any, token: str
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.2, cand_s=0.1, rounds=2)
    reply = _finish(client, claimed, token)
    assert reply.status_code == 400
    assert reply.json() == {"error": "the job has 2 complete rounds of the 5 it needs"}
    assert Job.objects.get(id=claimed["id"]).status == Job.RUNNING


@pytest.mark.parametrize(
    ("arm", "error"),
    [
        (
            {"round": 21, "arm": "baseline", "step_s": [0.1] * 3},
            "arm.round must be a whole number in 1..20",
        ),
        ({"round": 1, "arm": "both", "step_s": [0.1] * 3}, "arm.arm must be baseline or candidate"),
        (
            {"round": 1, "arm": "baseline", "step_s": [0.1, "x", 0.1]},
            "arm.step_s[1] is not a finite number",
        ),
        (
            {"round": 1, "arm": "baseline", "step_s": [0.1, 0.0, 0.1]},
            "arm.step_s must hold at least 3 positive step times",
        ),
        (
            {"round": 1, "arm": "baseline", "step_s": [0.1] * 3, "loss": [1, "x"]},
            "arm.loss[1] is not a finite number",
        ),
    ],
)
def test_a_bad_arm_is_rejected_in_one_sentence(
    owner: Any, run: Any, token: str, arm: dict, error: str
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    body = {"claim_token": claimed["claim_token"], "arm": arm}
    reply = _post(client, f"/api/v1/jobs/{claimed['id']}/progress", body, token)
    assert reply.status_code == 400 and reply.json() == {"error": error}
    assert not JobArm.objects.exists()


def test_a_wrong_claim_token_is_a_conflict(owner: Any, run: Any, token: str) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.2, cand_s=0.1)
    body = {"claim_token": "forged", "result": FORGED}
    assert _post(client, f"/api/v1/jobs/{claimed['id']}/result", body, token).status_code == 409
    assert _post(client, f"/api/v1/jobs/{claimed['id']}/progress", body, token).status_code == 409
    assert Job.objects.get(id=claimed["id"]).status == Job.RUNNING


def test_an_inconclusive_job_keeps_the_estimate_in_the_ranking(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    # 0.95x with steps spread +-90%: the shape of the job that was once called refuted.
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.105, spread=0.9, rounds=20)
    with django_capture_on_commit_callbacks(execute=True):
        reply = _finish(client, claimed, token)
    assert reply.json()["verdict"] == "inconclusive"
    job = Job.objects.get(id=claimed["id"])
    assert job.ci_low < 0.95 and job.ci_high > 1.0
    assert job.stop_reason == "stopped at the round limit (20) with the interval still too wide"
    verification = FixVerification.objects.get(run=run)
    assert verification.status == "inconclusive"
    assert verification.reason == "inconclusive \u2014 more rounds needed"
    assert verified_gains_for_run(run=run) == {}  # nothing overrides the estimate
    assert measured_gains_for_run(run=run)["dataloader.num_workers"]["status"] == "inconclusive"


def test_an_inconclusive_job_that_stopped_early_says_it_ran_out_of_time(
    owner: Any, run: Any, token: str
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.105, spread=0.9, rounds=6)
    assert _finish(client, claimed, token).status_code == 200
    state = Client()
    state.force_login(owner)
    job = state.get(f"/jobs/{claimed['id']}.json").json()
    assert job["verdict_label"] == "inconclusive \u2014 more rounds needed"
    assert job["stop_reason"] == (
        "stopped at the time bound after 6 of 20 rounds, interval too wide"
    )
    progress = {k: job["progress"][k] for k in ("done", "total", "fraction")}
    assert progress == {"done": 12, "total": 12, "fraction": 1.0}
    assert job["state"] == "done" and job["progress"]["text"] == "6 rounds measured"
    assert job["runner_id"] == "r1"


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
    assert services.job_claim(project=run.project, host=run.host, runner_id="r1") is not None
    later = timezone.now() + services.claim_ttl() + timedelta(seconds=1)
    assert services.jobs_expire_claims(now=later) == 1
    job.refresh_from_db()
    assert job.status == Job.FAILED and "claim expired" in job.error


def test_try_this_fix_queues_the_value_of_the_runs_finding(owner: Any, run: Any) -> None:
    Finding.objects.create(
        run=run,
        rule_id="dataloader.num_workers",
        rank=1,
        score=0.5,
        title="t",
        risk="data-path",
        confidence=0.9,
        estimated_gain=0.5,
        fix={
            "text": "t",
            "snippet": "num_workers=5",
            "knob": "num_workers=5",
            "knobs": {"num_workers": 5},
        },
    )
    browser = Client()
    browser.force_login(owner)
    reply = browser.post(f"/runs/{run.run_id}/jobs/", {"finding_id": "dataloader.num_workers"})
    job = Job.objects.get()
    assert reply.status_code == 302 and reply["Location"] == f"/jobs/{job.id}/"
    assert job.knobs == {"num_workers": 5}  # the rule's value, not a formula of the server's
    page = browser.get(f"/jobs/{job.id}/")
    assert page.status_code == 200 and b"rounds-chart" in page.content
    state = browser.get(f"/jobs/{job.id}.json").json()
    assert state["status"] == "queued" and state["progress"]["total"] == 10


def test_try_this_fix_without_a_value_queues_nothing_and_says_why(owner: Any, run: Any) -> None:
    browser = Client()
    browser.force_login(owner)
    for fields in (
        {"finding_id": "dataloader.num_workers"},  # no such finding on this run
        {"finding_id": "dataloader.num_workers", "knob": "num_workers=N"},
    ):
        reply = browser.post(f"/runs/{run.run_id}/jobs/", fields, follow=True)
        assert reply.status_code == 200
    assert Job.objects.count() == 0
    text = reply.content.decode()
    assert "no knob value" in text or "not a whole number" in text


def test_an_outsider_sees_no_job_and_cannot_start_one(owner: Any, outsider: Any, run: Any):
    job = _job(owner, run)
    browser = Client()
    browser.force_login(outsider)
    assert browser.get(f"/jobs/{job.id}/").status_code == 404
    assert browser.get(f"/jobs/{job.id}.json").status_code == 404
    assert browser.post(f"/runs/{run.run_id}/jobs/", {"knob": "threads=1"}).status_code == 404
    assert Job.objects.count() == 1


def test_a_stored_fix_gives_its_typed_knob_values_checked_again() -> None:
    assert fix_knobs({"knob": "num_workers=6", "knobs": {"num_workers": 6}}) == {"num_workers": 6}
    assert fix_knobs({"knob": "pin_memory=true"}) == {"pin_memory": True}  # stored before knobs
    assert fix_knobs({"knob": "batch_size=N"}) == {}  # no concrete value to try
    assert fix_knobs({"knobs": {"num_workers": 9999}}) == {}  # off the catalogue
    assert fix_knobs({"text": "no knob"}) == {} and fix_knobs(None) == {}


def test_the_run_page_shows_the_jobs_panel(owner: Any, run: Any) -> None:
    job = _job(owner, run)
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{run.run_id}/")
    assert page.status_code == 200
    assert b'data-testid="jobs-panel"' in page.content
    assert f'href="/jobs/{job.id}/"'.encode() in page.content
