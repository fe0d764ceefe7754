"""`/metrics`: a project's live runs for Prometheus, read back with prometheus_client's own
parser, scoped by the project token."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.server.agent_client import RUN_ID, Agent, batch_body

pytestmark = pytest.mark.django_db


def scrape(token: str | None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().get("/metrics", **headers)


def samples(body: bytes) -> dict[str, list[Any]]:
    """{family name: its samples}, for the families that have any."""
    found: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(body.decode()):
        if family.samples:
            found.setdefault(family.name, []).extend(family.samples)
    return found


def stream_now(agent: Agent, **start: Any) -> None:
    assert agent.start(**start).status_code == 200
    body = batch_body(start=time.time() - 20, n=10, run_id=agent.run_id, agent_id=agent.agent_id)
    assert agent.post("batch", body).status_code == 200


def test_it_exports_the_latest_device_values_with_the_labels_dcgm_users_asked_for(
    token: str,
) -> None:
    stream_now(Agent(token))
    reply = scrape(token)
    assert reply.status_code == 200
    assert reply["Content-Type"].startswith("text/plain; version=")  # the text format
    found = samples(reply.content)
    (gpu,) = found["perfweb_gpu_utilization_percent"]
    assert gpu.value == 59.0  # the last of 50..59
    assert gpu.labels == {
        "project": "vision",
        "run": RUN_ID,
        "run_name": "resnet50-bs256",
        "host": "gpu-node-07",
        "device": "gpu:0",
        "rank": "",
        "gpu": "0",
    }
    (rss,) = found["perfweb_process_rss_bytes"]
    assert rss.value == 1.2e9 + 9 and rss.labels["device"] == "process"
    live = {s.labels["run"]: s for s in found["perfweb_run_live"]}
    # An older agent (no workload.kind fact) timed optimizer steps: a training run, as the
    # run page and the findings API label it too (perfweb_recommender.coverage.workload_kind).
    assert live[RUN_ID].labels["kind"] == "training" and live[RUN_ID].value == 1
    assert {s.labels["status"]: s.value for s in found["perfweb_runs"]} == {"running": 1}


def test_it_exports_step_time_quantiles_and_the_data_wait_share(token: str) -> None:
    stream_now(Agent(token))
    found = samples(scrape(token).content)
    quantiles = {s.labels["quantile"]: s.value for s in found["perfweb_step_duration_seconds"]}
    assert quantiles["0.5"] == pytest.approx(0.50)
    assert quantiles["0.99"] == pytest.approx(0.51, abs=1e-3)
    (wait,) = found["perfweb_data_wait_ratio"]
    assert wait.value == pytest.approx((0.30 + 0.29) / (0.51 + 0.49))
    assert wait.labels["rank"] == "0"
    assert "perfweb_request_latency_seconds" not in found  # a training run


def test_it_exports_the_latest_value_of_every_scalar_the_script_logs(token: str) -> None:
    agent = Agent(token)
    assert agent.start().status_code == 200
    now = time.time()
    body = batch_body(start=now - 20, n=10, run_id=agent.run_id, agent_id=agent.agent_id)
    body["metrics"] += [
        {"device": "rank:0", "name": "scalar.loss", "t": [now - 9, now - 5], "v": [2.5, 1.75]},
        {"device": "rank:0", "name": "scalar.train.lr", "t": [now - 5], "v": [3e-4]},
        # older than the two minutes a live value may be: not exported
        {"device": "rank:0", "name": "scalar.stale", "t": [now - 600], "v": [9.0]},
    ]
    assert agent.post("batch", body).status_code == 200
    found = samples(scrape(token).content)
    scalars = {s.labels["name"]: s for s in found["perfweb_script_scalar"]}
    assert set(scalars) == {"loss", "train.lr"}
    assert scalars["loss"].value == 1.75 and scalars["train.lr"].value == pytest.approx(3e-4)
    assert scalars["loss"].labels == {
        "project": "vision",
        "run": RUN_ID,
        "run_name": "resnet50-bs256",
        "host": "gpu-node-07",
        "rank": "0",
        "name": "loss",
    }
    # the script's scalars are not device gauges: the GPU families are unchanged
    assert [s.value for s in found["perfweb_gpu_utilization_percent"]] == [59.0]


def test_an_inference_run_exports_request_latency_instead_of_step_time(token: str) -> None:
    stream_now(Agent(token), facts={"workload.kind": "inference"})
    found = samples(scrape(token).content)
    assert {s.labels["quantile"] for s in found["perfweb_request_latency_seconds"]} == {
        "0.5",
        "0.95",
        "0.99",
    }
    assert "perfweb_step_duration_seconds" not in found


def test_it_exports_the_findings_of_live_runs_by_id(token: str) -> None:
    from perfweb.diagnostics.models import Finding
    from perfweb.runs.models import Run

    stream_now(Agent(token))
    Finding.objects.create(
        run=Run.objects.get(run_id=RUN_ID),
        rule_id="dataloader.num_workers",
        rank=1,
        score=0.5,
        title="DataLoader wait",
        risk="data-path",
        confidence=0.9,
        estimated_gain=0.42,
    )
    found = samples(scrape(token).content)
    (gain,) = found["perfweb_finding_estimated_gain_ratio"]
    assert gain.value == pytest.approx(0.42)
    assert gain.labels["id"] == "dataloader.num_workers" and gain.labels["risk"] == "data-path"
    (count,) = found["perfweb_findings"]
    assert count.labels == {"project": "vision", "id": "dataloader.num_workers"}
    assert count.value == 1


def test_a_finished_run_leaves_the_live_gauges(token: str) -> None:
    agent = Agent(token)
    stream_now(agent)
    assert agent.finish().status_code == 200
    found = samples(scrape(token).content)
    assert "perfweb_gpu_utilization_percent" not in found
    assert "perfweb_run_live" not in found
    assert {s.labels["status"]: s.value for s in found["perfweb_runs"]} == {"finished": 1}


def test_it_is_scoped_to_the_token_s_project(token: str, other_token: str) -> None:
    stream_now(Agent(token))
    found = samples(scrape(other_token).content)
    assert "perfweb_gpu_utilization_percent" not in found
    assert "perfweb_runs" not in found


@pytest.mark.parametrize("bad", [None, "not-a-token"])
def test_it_refuses_a_scrape_without_a_valid_token(bad: str | None) -> None:
    reply = scrape(bad)
    assert reply.status_code == 401
    assert "project token" in reply.json()["error"]


def test_it_exports_each_phase_of_the_step_anatomy_over_the_last_minute(token: str) -> None:
    agent = Agent(token)
    assert agent.start().status_code == 200
    now = time.time()
    body = batch_body(start=now - 20, n=10, run_id=agent.run_id, agent_id=agent.agent_id)
    times = [now - 9, now - 8, now - 7]
    body["metrics"] += [
        {"device": "rank:0", "name": "step.phase.optimizer", "t": times, "v": [0.2, 0.3, 0.9]},
        {"device": "rank:0", "name": "step.phase.forward", "t": times, "v": [0.1, 0.1, 0.1]},
    ]
    assert agent.post("batch", body).status_code == 200
    found = samples(scrape(token).content)
    phases = {s.labels["phase"]: s for s in found["perfweb_step_phase_seconds"]}
    assert phases["optimizer"].value == pytest.approx(0.3)  # the median, not the last
    assert phases["forward"].value == pytest.approx(0.1)
    assert phases["optimizer"].labels["rank"] == "0"


def test_it_exports_the_mfu_of_a_run_whose_step_flops_were_counted(token: str) -> None:
    agent = Agent(token)
    assert agent.start().status_code == 200
    now = time.time()
    body = batch_body(start=now - 20, n=10, run_id=agent.run_id, agent_id=agent.agent_id)
    body["facts"] = {"flops.per_step": 1e9, "cpu.peak_flops": 1e10, "cpu.peak_threads": 2}
    assert agent.post("batch", body).status_code == 200
    found = samples(scrape(token).content)
    (mfu,) = found["perfweb_model_flops_utilization_ratio"]
    median = {s.labels["quantile"]: s.value for s in found["perfweb_step_duration_seconds"]}
    assert mfu.value == pytest.approx(1e9 / median["0.5"] / 1e10)
