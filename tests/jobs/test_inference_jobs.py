"""Inference jobs on the server (issue 19): the arms' latency, batch sizes, memory and output
agreement are stored and checked; metrics, agreement and the verdict are recomputed from them
against the job's own tolerance; "faster but changes results" is never a verified gain; the
before/after table is in the job's JSON and page; "Try this fix" works for inference findings.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from perfweb.alerts.why import as_payload
from perfweb.diagnostics.gains import measured_gains_for_run, verified_gains_for_run
from perfweb.diagnostics.models import Finding, FixVerification
from perfweb.diagnostics.selectors import finding_for_run
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.diagnostics.verification import verified_finding_id
from perfweb.jobs import services
from perfweb.jobs.models import Job, JobArm
from perfweb.jobs.schemas import JobSizes
from perfweb.runs.models import Run
from perfweb_contract.verdicts import CHANGES_RESULTS
from tests.diagnostics.conftest import stream_steps
from tests.server.agent_client import Agent

MIB = 2**20
# What a forger posts as the result: faster, outputs in tolerance. Never taken.
FORGED = {
    "speedup": 3.0, "ci_low": 2.9, "ci_high": 3.1, "verdict": "faster", "measured_gain": 0.67,
    "agreement": {"visible": True, "within_tolerance": True, "top1_agreement": 1.0},
}  # fmt: skip
AGREE = {
    "samples": 32,
    "top1_agreement": 1.0,
    "max_abs_diff": 2e-6,
    "mean_abs_diff": 3e-7,
    "max_rel_diff": 1e-5,
}


def _steps(mean: float, n: int = 8) -> list[float]:
    """n latencies around `mean` (+-2%), the last one a 1.5x tail."""
    values = [mean * (0.98 + 0.04 * i / (n - 2)) for i in range(n - 1)]
    return [*values, mean * 1.5]


def _arm(
    number: int, which: str, mean: float, *, outputs: dict | None = None,
    kind: str = "inference", rss_mib: int = 400, batch: int = 4,
) -> dict[str, Any]:  # fmt: skip
    step_s = _steps(mean)
    return {
        "round": number,
        "arm": which,
        "step_s": step_s,
        "loss": None,
        "kind": kind,
        "batch_sizes": [batch] * len(step_s),
        "peak_rss_bytes": rss_mib * MIB,
        "cuda_max_allocated_bytes": None,
        "outputs": outputs,
    }


def _post(client: Client, path: str, body: dict, token: str) -> Any:
    return client.post(
        path,
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def _claim(client: Client, token: str, host: str) -> dict:
    reply = _post(client, "/api/v1/jobs/claim", {"host": host, "runner_id": "r1"}, token)
    assert reply.status_code == 200, reply.content
    return reply.json()["job"]


def _run_job(
    client: Client,
    token: str,
    host: str,
    *,
    outputs_by_round: list[dict | None],
    base_s: float = 0.02,
    cand_s: float = 0.01,
    kind: str = "inference",
    loss: tuple[list[float], list[float]] | None = None,
) -> dict:
    """Claim the queued job, post its rounds as the runner does, then a forged result."""
    claimed = _claim(client, token, host)
    base, claim = f"/api/v1/jobs/{claimed['id']}", claimed["claim_token"]
    for number, outputs in enumerate(outputs_by_round, start=1):
        for which, mean in (("baseline", base_s), ("candidate", cand_s)):
            arm = _arm(
                number,
                which,
                mean,
                outputs=outputs if which == "candidate" else None,
                kind=kind,
                rss_mib=400 if which == "baseline" else 150,
            )
            if loss is not None:
                arm["loss"] = loss[0] if which == "baseline" else loss[1]
            reply = _post(client, f"{base}/progress", {"claim_token": claim, "arm": arm}, token)
            assert reply.status_code == 200, reply.content
    reply = _post(client, f"{base}/result", {"claim_token": claim, "result": FORGED}, token)
    assert reply.status_code == 200, reply.content
    return claimed


def _browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _quantize_job(owner: Any, run: Any, **tolerance: float) -> Job:
    return services.job_create(
        user=owner,
        run=run,
        knobs={"quantize": "dynamic"},
        finding_id="model.quantization",
        sizes=JobSizes(**tolerance),
    )


def test_inference_arms_are_stored_and_their_metrics_recomputed(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _quantize_job(owner, run)
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        claimed = _run_job(client, token, run.host, outputs_by_round=[AGREE] * 5)
    stored = JobArm.objects.get(job_id=claimed["id"], round=1, arm="candidate")
    assert stored.kind == "inference" and stored.batch_sizes == [4] * 8
    assert stored.peak_rss_bytes == 150 * MIB and stored.cuda_max_allocated_bytes is None
    assert stored.outputs == {**AGREE, "mismatched": 0}
    job = Job.objects.get(id=claimed["id"])
    assert job.verdict == "faster" and job.speedup == pytest.approx(2.0)
    result = job.result
    assert result["kind"] == "inference"
    base, cand = result["baseline_metrics"], result["candidate_metrics"]
    assert base["latency_p50_s"] == pytest.approx(0.02, rel=0.03)
    assert cand["latency_p50_s"] == pytest.approx(0.01, rel=0.03)
    assert base["latency_p99_s"] > 1.4 * base["latency_p50_s"]  # the tail step
    assert cand["throughput_sps"] == pytest.approx(4 * cand["throughput_rps"])
    assert base["peak_rss_bytes"] == 400 * MIB and cand["peak_rss_bytes"] == 150 * MIB
    assert result["agreement"]["visible"] and result["agreement"]["within_tolerance"]
    assert result["agreement"]["samples"] == 5 * 32
    verification = FixVerification.objects.get(run=run, finding_id="model.quantization")
    assert verification.status == "verified"
    assert verified_gains_for_run(run=run) == {"model.quantization": pytest.approx(0.5)}

    state = _browser(owner).get(f"/jobs/{job.id}.json").json()
    rows = {row["key"]: row for row in state["before_after"]}
    assert list(rows) == [
        "latency_p50_s",
        "latency_p99_s",
        "throughput_rps",
        "throughput_sps",
        "peak_rss_bytes",
        "top1_agreement",
        "max_rel_diff",
    ]
    assert rows["latency_p50_s"]["change"].startswith("-50.") and rows["latency_p50_s"]["better"]
    assert rows["peak_rss_bytes"]["before"] == "400.0 MiB"
    assert rows["peak_rss_bytes"]["after_value"] == 150 * MIB
    assert rows["top1_agreement"]["after"] == "100.0%" and rows["top1_agreement"]["better"]
    assert state["kind"] == "inference"
    assert state["results_check"].startswith("Outputs agree over 160 requests: top-1 100.0%")


def test_a_forged_faster_result_outside_the_agreement_tolerance_changes_results(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    _quantize_job(owner, run)
    client = Client()
    lossy = {**AGREE, "top1_agreement": 0.95, "max_rel_diff": 0.2}  # one round: the worst
    with django_capture_on_commit_callbacks(execute=True):
        claimed = _run_job(
            client, token, run.host, outputs_by_round=[AGREE, AGREE, lossy, AGREE, AGREE]
        )
    job = Job.objects.get(id=claimed["id"])
    assert job.verdict == CHANGES_RESULTS and job.verdict_label == "faster but changes results"
    assert job.speedup == pytest.approx(2.0) and job.ci_low > 1.0  # faster it is...
    assert job.result["speed_verdict"] == "faster"
    assert job.result["agreement"]["top1_agreement"] == 0.95
    assert job.result["agreement"]["within_tolerance"] is False
    verification = FixVerification.objects.get(run=run, finding_id="model.quantization")
    assert verification.status == "refuted"  # ...but never verified
    assert verification.reason == (
        "faster but changes results: top-1 agreement 95.0% below the 99% minimum; "
        "max rel. diff 2.00e-01 above the 1e-02 tolerance"
    )
    assert verified_gains_for_run(run=run) == {"model.quantization": 0.0}
    assert measured_gains_for_run(run=run)["model.quantization"]["status"] == "refuted"
    state = _browser(owner).get(f"/jobs/{job.id}.json").json()
    assert state["verdict_label"] == "faster but changes results"
    assert state["results_check"].endswith("Not verified.")
    rows = {row["key"]: row for row in state["before_after"]}
    assert rows["top1_agreement"]["better"] is False
    assert rows["top1_agreement"]["change"] == "below the 99% minimum"
    page = _browser(owner).get(f"/jobs/{job.id}/").content.decode()
    assert 'data-testid="before-after"' in page and "below the 99% minimum" in page


def test_a_faster_inference_result_without_outputs_is_not_verified(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    """The probe's forgery: candidate arms posted without `outputs` skipped the tolerance
    check and ended verified. And an inference run's arms called training, with losses
    instead of outputs, are judged by the run's own kind."""
    client = Client()
    _quantize_job(owner, run)
    with django_capture_on_commit_callbacks(execute=True):
        claimed = _run_job(client, token, run.host, outputs_by_round=[None] * 5)
    job = Job.objects.get(id=claimed["id"])
    assert job.verdict == "faster" and job.result["agreement"]["visible"] is False
    verification = FixVerification.objects.get(run=run, finding_id="model.quantization")
    assert verification.status == "inconclusive"
    assert verification.reason == (
        "faster, not verified: the outputs were not compared"
        " (outputs not captured: no module call seen)"
    )
    assert verified_gains_for_run(run=run) == {}
    state = _browser(owner).get(f"/jobs/{job.id}.json").json()
    assert state["results_check"].endswith(
        "Not verified: the outputs were not compared (outputs not captured: no module call seen)."
    )

    Run.objects.filter(id=run.id).update(facts={"workload.kind": "inference"})
    _quantize_job(owner, run)
    with django_capture_on_commit_callbacks(execute=True):
        _run_job(
            client,
            token,
            run.host,
            outputs_by_round=[None] * 5,
            kind="training",
            loss=([0.5] * 8, [0.5] * 8),
        )
    verification.refresh_from_db()
    assert verification.status == "inconclusive" and "outputs were not compared" in (
        verification.reason
    )


def test_the_jobs_own_tolerance_decides(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    """The same measured summary: verified under a tolerance of top-1 >= 0.9 / rtol 0.5 set
    at creation, "faster but changes results" under a tolerance of 0."""
    close = {**AGREE, "top1_agreement": 0.95, "max_rel_diff": 0.2}
    client = Client()
    _quantize_job(owner, run, agreement_top1=0.9, agreement_rtol=0.5)
    with django_capture_on_commit_callbacks(execute=True):
        loose = _run_job(client, token, run.host, outputs_by_round=[close] * 5)
    assert loose["agreement_top1"] == 0.9 and loose["agreement_rtol"] == 0.5  # the job spec
    assert Job.objects.get(id=loose["id"]).verdict == "faster"
    assert FixVerification.objects.get(run=run).status == "verified"

    _quantize_job(owner, run, agreement_top1=1.0, agreement_rtol=0.0)
    with django_capture_on_commit_callbacks(execute=True):
        strict = _run_job(client, token, run.host, outputs_by_round=[AGREE] * 5)
    assert Job.objects.get(id=strict["id"]).verdict == CHANGES_RESULTS
    verification = FixVerification.objects.get(run=run)
    assert verification.job_id == strict["id"] and verification.status == "refuted"
    assert verified_gains_for_run(run=run) == {"model.quantization": 0.0}


def test_a_faster_training_fix_whose_loss_moved_changes_results(
    owner: Any, run: Any, token: str, django_capture_on_commit_callbacks: Any
) -> None:
    services.job_create(user=owner, run=run, knobs={"amp": "bf16"}, finding_id="precision.amp")
    client = Client()
    base_loss, cand_loss = [2.0] * 11, [2.5] * 11  # 3 warm-up steps + the 8 kept
    with django_capture_on_commit_callbacks(execute=True):
        claimed = _run_job(
            client,
            token,
            run.host,
            outputs_by_round=[None] * 5,
            kind="training",
            loss=(base_loss, cand_loss),
        )
    job = Job.objects.get(id=claimed["id"])
    assert job.verdict == CHANGES_RESULTS and job.result["kind"] == "training"
    assert FixVerification.objects.get(run=run).reason == (
        "faster but changes results: loss 25.0% from the baseline's, outside 5%"
    )
    state = _browser(owner).get(f"/jobs/{job.id}.json").json()
    keys = [row["key"] for row in state["before_after"]]
    assert keys == [
        "step_time_mean_s",
        "throughput_steps_per_s",
        "throughput_sps",
        "peak_rss_bytes",
        "loss",
    ]
    loss = state["before_after"][-1]
    assert (loss["before"], loss["after"], loss["better"]) == ("2", "2.5", False)


def test_the_inference_rounds_of_an_old_shaped_arm_still_compare(
    owner: Any, run: Any, token: str
) -> None:
    """A runner that posts only the old keys (step times, loss) still gets a verdict, and
    the table says what it could not see."""
    _quantize_job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    for number in range(1, 6):
        for which, mean in (("baseline", 0.02), ("candidate", 0.01)):
            body = {
                "claim_token": claimed["claim_token"],
                "arm": {"round": number, "arm": which, "step_s": _steps(mean)},
            }
            reply = _post(client, f"/api/v1/jobs/{claimed['id']}/progress", body, token)
            assert reply.status_code == 200, reply.content
    body = {"claim_token": claimed["claim_token"], "result": FORGED}
    reply = _post(client, f"/api/v1/jobs/{claimed['id']}/result", body, token)
    assert reply.status_code == 200, reply.content
    state = _browser(owner).get(f"/jobs/{claimed['id']}.json").json()
    assert state["verdict"] == "faster"
    rows = {row["key"]: row for row in state["before_after"]}
    assert rows["peak_rss_bytes"]["before"] == "not measured"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"kind": "serving"}, "arm.kind must be one of training, inference, unknown"),
        ({"batch_sizes": [4, 4]},
         "arm.batch_sizes must be null or a list of 8 whole numbers, one per step time"),
        ({"batch_sizes": [4] * 7 + [0]}, "arm.batch_sizes[7] must be a whole number in "
                                         "1..2147483648"),
        ({"batch_sizes": [4] * 7 + [True]}, "arm.batch_sizes[7] must be a whole number in "
                                            "1..2147483648"),
        ({"peak_rss_bytes": -1}, "arm.peak_rss_bytes must be a whole number in "
                                 "0..1125899906842624"),
        ({"cuda_max_allocated_bytes": 1.5}, "arm.cuda_max_allocated_bytes must be a whole "
                                            "number in 0..1125899906842624"),
        ({"arm": "baseline", "outputs": AGREE}, "arm.outputs is the candidate's agreement "
         "with the baseline: only a candidate arm has it"),
        ({"outputs": [1]}, "arm.outputs must be null or an object"),
        ({"outputs": {**AGREE, "samples": "32"}},
         "arm.outputs.samples must be a whole number in 0..1000000000"),
        ({"outputs": {**AGREE, "top1_agreement": 1.5}},
         "arm.outputs.top1_agreement must be null or a number in 0..1"),
        ({"outputs": {**AGREE, "max_rel_diff": -0.1}},
         "arm.outputs.max_rel_diff must be null or a number of at least 0"),
        ({"outputs": {**AGREE, "mean_abs_diff": "small"}},
         "arm.outputs.mean_abs_diff is not a finite number"),
        ({"outputs": {**AGREE, "note": 7}},
         "arm.outputs.note must be a string of at most 200 characters"),
    ],
)  # fmt: skip
def test_a_bad_inference_arm_is_a_400_and_stores_nothing(
    owner: Any, run: Any, token: str, fields: dict, error: str
) -> None:
    _quantize_job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    arm = {**_arm(1, "candidate", 0.01, outputs=AGREE), **fields}
    body = {"claim_token": claimed["claim_token"], "arm": arm}
    reply = _post(client, f"/api/v1/jobs/{claimed['id']}/progress", body, token)
    assert reply.status_code == 400 and reply.json() == {"error": error}
    assert not JobArm.objects.exists()
    assert Job.objects.get(id=claimed["id"]).status == Job.RUNNING


def test_the_form_sets_the_agreement_tolerance(owner: Any, run: Any, token: str) -> None:
    browser = _browser(owner)
    page = browser.get(f"/runs/{run.run_id}/jobs/").content.decode()
    assert 'name="agreement_top1"' in page and 'value="0.99"' in page
    assert 'name="agreement_rtol"' in page and 'value="0.01"' in page
    # the size fields carry the limits the server and the runner check (2 rounds at least)
    assert '<input name="rounds" type="number" min="2" max="20" value="5">' in page
    assert '<input name="max_rounds" type="number" min="2" max="20" value="20">' in page
    reply = browser.post(
        f"/runs/{run.run_id}/jobs/",
        {
            "knob": "quantize=dynamic",
            "agreement_top1": "0.95",
            "agreement_rtol": "5e-2",
        },
    )
    job = Job.objects.get()
    assert reply.status_code == 302 and reply["Location"] == f"/jobs/{job.id}/"
    assert (job.agreement_top1, job.agreement_rtol) == (0.95, 0.05)
    claimed = _claim(Client(), token, run.host)
    assert (claimed["agreement_top1"], claimed["agreement_rtol"]) == (0.95, 0.05)
    page = browser.get(f"/jobs/{job.id}/").content.decode()
    assert "top-1 agreement 0.95 or max rel. difference 0.05" in page


@pytest.mark.parametrize(
    ("name", "raw", "error"),
    [
        ("agreement_top1", "nan", "agreement_top1 must be a decimal number"),
        ("agreement_top1", "1.5", "agreement_top1 must be a number in 0..1"),
        ("agreement_rtol", "-0.1", "agreement_rtol must be a decimal number"),
        ("agreement_rtol", "1_0", "agreement_rtol must be a decimal number"),
        ("agreement_rtol", "2", "agreement_rtol must be a number in 0..1"),
    ],
)
def test_a_bad_tolerance_in_the_form_starts_no_job(
    owner: Any, run: Any, name: str, raw: str, error: str
) -> None:
    browser = _browser(owner)
    reply = browser.post(
        f"/runs/{run.run_id}/jobs/", {"knob": "quantize=dynamic", name: raw}, follow=True
    )
    assert error in reply.content.decode()
    assert not Job.objects.exists()


def test_the_json_api_starts_a_job_with_its_tolerance(owner: Any, outsider: Any, run: Any) -> None:
    path = f"/runs/{run.run_id}/jobs.json"
    body = {
        "knobs": {"quantize": "dynamic"},
        "finding_id": "model.quantization",
        "rounds": 4,
        "steps": 30,
        "agreement_top1": 0.98,
        "agreement_rtol": 0,
    }
    reply = _browser(owner).post(path, json.dumps(body), content_type="application/json")
    assert reply.status_code == 201, reply.content
    state = reply.json()
    job = Job.objects.get()
    assert state["id"] == job.id and state["status"] == "queued"
    assert (state["agreement_top1"], state["agreement_rtol"]) == (0.98, 0.0)
    assert (job.rounds, job.steps, job.knobs) == (4, 30, {"quantize": "dynamic"})

    for bad, error in (
        ({**body, "agreement_rtol": "0.1"}, "agreement_rtol must be a number in 0..1"),
        ({**body, "agreement_top1": True}, "agreement_top1 must be a number in 0..1"),
        ({**body, "agreement_top1": 1.01}, "agreement_top1 must be a number in 0..1"),
        ({**body, "rounds": "4"}, "rounds must be in 2..20"),
        ({**body, "warmup": True}, "warmup must be in 0..100"),
        ({**body, "max_rounds": 3}, "max_rounds must be in 4..20"),
        ({**body, "finding_id": 7}, "finding_id must be a string of at most 200 characters"),
        ({**body, "knobs": {"command": "sh"}}, 'unknown knob "command"'),
        ({**body, "knobs": {}}, "choose at least one knob"),
        (
            {**body, "knobs": {"threads": 2}},
            "finding model.quantization has no knob among ['threads']",
        ),
        ([1, 2], "the body must be a JSON object"),
    ):
        reply = _browser(owner).post(path, json.dumps(bad), content_type="application/json")
        assert reply.status_code == 400 and error in reply.json()["error"], (bad, reply.json())
    reply = _browser(owner).post(path, "{", content_type="application/json")
    assert reply.status_code == 400 and "not valid JSON" in reply.json()["error"]
    assert (
        _browser(outsider).post(path, json.dumps(body), content_type="application/json").status_code
        == 404
    )
    assert Client().post(path, json.dumps(body), content_type="application/json").status_code == 401
    assert Job.objects.count() == 1


# --- "Try this fix" on inference findings, from a real diagnosis --------------------------

CPU_SERVING = {
    "workload.kind": "inference", "steps.source": "module", "inference.grad_enabled": True,
    "model.linear_param_share": 0.95, "model.dtype": "float32", "model.training": False,
    "training.backward": False,
}  # fmt: skip
GPU_CONV_SERVING = {
    "workload.kind": "inference", "steps.source": "module", "model.conv_param_share": 0.9,
    "model.channels_last": False, "model.dtype": "float32", "model.training": False,
    "training.backward": False, "cuda.initialized": True, "cuda.device_count": 1,
}  # fmt: skip


def _diagnosed_inference_run(token: str, run_id: str, facts: dict) -> Run:
    agent = Agent(token, run_id=run_id, agent_id=run_id)
    start = {} if facts.get("cuda.initialized") else {"devices": []}  # a CPU host: no GPU
    assert agent.start(command=["python", "serve.py"], **start).status_code == 200
    stream_steps(agent, steps=60, step_s=0.02, wait_share=0.0, facts=facts)
    run = Run.objects.get(run_id=run_id)
    diagnose_run_task(run.id)
    return run


@pytest.mark.parametrize(
    ("facts", "finding_id", "knob_text", "knobs"),
    [
        (CPU_SERVING, "inference.autograd_enabled", "inference_mode=true",
         {"inference_mode": True}),
        (CPU_SERVING, "model.quantization", "quantize=dynamic", {"quantize": "dynamic"}),
        (GPU_CONV_SERVING, "inference.channels_last", "channels_last=true",
         {"channels_last": True}),
        (GPU_CONV_SERVING, "inference.compile_runtime", "compile=default",
         {"compile": "default"}),
    ],
)  # fmt: skip
def test_try_this_fix_works_for_inference_findings(
    owner: Any, token: str, settings: Any, tmp_path: Any, facts: dict, finding_id: str,
    knob_text: str, knobs: dict,
) -> None:  # fmt: skip
    settings.PERFWEB_TRACE_DIR = str(tmp_path / "traces")
    run = _diagnosed_inference_run(token, "f" * 32, facts)
    assert Finding.objects.filter(run=run, rule_id=finding_id).exists(), list(
        Finding.objects.filter(run=run).values_list("rule_id", flat=True)
    )
    browser = _browser(owner)
    page = browser.get(f"/runs/{run.run_id}/").content.decode()
    # The button beside the finding, as for a training finding: its finding and its knob.
    button = (
        f'<input type="hidden" name="finding_id" value="{finding_id}">\n'
        f'  <input type="hidden" name="knob" value="{knob_text}">'
    )
    assert button in page
    reply = browser.post(f"/runs/{run.run_id}/jobs/", {"finding_id": finding_id, "knob": knob_text})
    job = Job.objects.get()
    assert reply.status_code == 302 and reply["Location"] == f"/jobs/{job.id}/"
    assert job.knobs == knobs and job.finding_id == finding_id
    assert verified_finding_id(finding_id=job.finding_id, knobs=job.knobs) == finding_id
    assert browser.get(f"/jobs/{job.id}/").status_code == 200


def test_a_changes_results_fix_is_no_measured_gain_in_the_ranking_or_alerts(
    owner: Any, token: str, settings: Any, tmp_path: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    """What the ranking, the fleet page ("what the top fix would have saved") and alert
    messages read is the stored finding's measured gain: 0 for a fix that changes results."""
    settings.PERFWEB_TRACE_DIR = str(tmp_path / "traces")
    run = _diagnosed_inference_run(token, "e" * 32, CPU_SERVING)
    estimated = Finding.objects.get(run=run, rule_id="model.quantization").estimated_gain
    assert estimated > 0.3
    _quantize_job(owner, run)
    lossy = {**AGREE, "top1_agreement": 0.9}
    with django_capture_on_commit_callbacks(execute=True):
        _run_job(Client(), token, run.host, outputs_by_round=[lossy] * 5)
    finding = Finding.objects.get(run=run, rule_id="model.quantization")
    assert finding.measured_gain == 0.0  # re-ranked on the verification: not the 50% measured
    stored = finding_for_run(run=run, rule_id="model.quantization")
    assert stored is not None and stored.measured_gain == 0.0
    why = as_payload(stored)  # what an alert would quote: no gain for a refuted fix
    assert why is not None and why["gain_pct"] is None
    top = Finding.objects.filter(run=run).order_by("rank").first()
    assert top is not None and top.rule_id != "model.quantization"
    page = _browser(owner).get(f"/runs/{run.run_id}/").content.decode()
    assert "badge-refuted" in page and "refuted · faster but changes results" in page
    assert "badge-verified" not in page
