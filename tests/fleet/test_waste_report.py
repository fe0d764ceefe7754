"""The fleet page and `GET /api/v1/waste`: GPU-hours by where they went, cost, energy,
core-hours of CPU-only runs and what each run's top fix would have saved."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client

from perfweb_recommender.thresholds import GIB
from tests.conftest import PASSWORD
from tests.server.agent_client import Agent

pytestmark = pytest.mark.django_db

GPU_RUN = "a" * 32
CPU_RUN = "b" * 32
H100 = {"key": "gpu:0", "kind": "gpu", "index": 0, "name": "NVIDIA H100 80GB HBM3"}


def stream(
    token: str,
    run_id: str,
    *,
    metrics: list[dict[str, Any]],
    start: float,
    end: float,
    devices: list[dict[str, Any]],
    tags: dict[str, str],
) -> None:
    agent = Agent(token, run_id=run_id, agent_id=run_id[::-1])
    assert agent.start(started_at=start, devices=devices, tags=tags).status_code == 200
    body = {
        "run_id": run_id,
        "agent_id": agent.agent_id,
        "seq": 0,
        "sent_at": end,
        "metrics": metrics,
        "facts": {},
        "devices": [],
        "dropped": 0,
    }
    assert agent.post("batch", body).status_code == 200
    finish = {
        "run_id": run_id,
        "agent_id": agent.agent_id,
        "ended_at": end,
        "exit_code": 0,
        "final": True,
    }
    assert agent.post("finish", finish).status_code == 200


@pytest.fixture
def fleet(token: str) -> float:
    """A GPU run (10 s busy, 10 s idle holding 8 GiB, 20 J a second) and a CPU-only run
    (two cores for 36 s), both ended a minute ago."""
    end = time.time() - 60
    start = end - 20
    seconds = [start + i for i in range(20)]
    stream(
        token,
        GPU_RUN,
        start=start,
        end=end,
        devices=[H100],
        tags={"user": "ada"},
        metrics=[
            {
                "device": "gpu:0",
                "name": "gpu.utilization",
                "t": seconds,
                "v": [90.0] * 10 + [0.0] * 10,
            },
            {"device": "gpu:0", "name": "gpu.memory_used", "t": seconds, "v": [8.0 * GIB] * 20},
            {
                "device": "gpu:0",
                "name": "gpu.energy",
                "t": seconds,
                "v": [20.0 * i for i in range(20)],
            },
        ],
    )
    cpu_seconds = [end - 36 + i for i in range(36)]
    stream(
        token,
        CPU_RUN,
        start=end - 36,
        end=end,
        devices=[],
        tags={"user": "grace"},
        metrics=[
            {
                "device": "process",
                "name": "process.cpu_percent",
                "t": cpu_seconds,
                "v": [200.0] * 36,
            },
        ],
    )
    from perfweb.diagnostics.models import Finding
    from perfweb.runs.models import Run

    Finding.objects.create(
        run=Run.objects.get(run_id=GPU_RUN),
        rule_id="dataloader.num_workers",
        rank=1,
        score=0.4,
        title="Raise num_workers",
        risk="data-path",
        confidence=0.9,
        estimated_gain=0.4,
    )
    return end


def waste(token: str, query: str = "window=day") -> Any:
    return Client().get(f"/api/v1/waste?{query}", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_it_splits_gpu_hours_into_busy_low_idle_holding_and_unattributed(
    fleet: float, token: str
) -> None:
    report = waste(token).json()
    hours = report["gpu_hours"]
    assert hours["busy"] == pytest.approx(10 / 3600)
    assert hours["idle_holding_memory"] == pytest.approx(10 / 3600)
    assert hours["low_utilization"] == 0
    assert hours["unattributed"] == pytest.approx(0, abs=1e-6)  # float rounding of epoch times
    assert report["energy_kwh"] == pytest.approx(19 * 20 / 3.6e6)
    assert report["core_hours"] == pytest.approx(2 * 36 / 3600)
    (gpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == GPU_RUN]
    assert gpu_run["gpus"] == 1 and gpu_run["gpu_model"] == "NVIDIA H100 80GB HBM3"
    (cpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == CPU_RUN]
    assert cpu_run["gpus"] == 0 and cpu_run["core_hours"] == pytest.approx(0.02)


def test_the_top_fix_says_how_many_gpu_hours_it_would_have_saved(fleet: float, token: str) -> None:
    report = waste(token).json()
    (gpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == GPU_RUN]
    fix = gpu_run["top_fix"]
    assert fix["id"] == "dataloader.num_workers" and fix["verified"] is False
    assert fix["recoverable_gpu_hours"] == pytest.approx(0.4 * 20 / 3600)
    assert report["recoverable_gpu_hours"] == pytest.approx(0.4 * 20 / 3600)


def test_a_regression_is_not_the_fix_that_would_have_saved_hours(fleet: float, token: str) -> None:
    from perfweb.diagnostics.models import Finding
    from perfweb.runs.models import Run

    Finding.objects.filter(rule_id="dataloader.num_workers").update(rank=2)
    Finding.objects.create(
        run=Run.objects.get(run_id=GPU_RUN),
        rule_id="run.regression",
        rank=1,
        score=0.6,
        title="Regressed vs run a",
        risk="data-path",
        confidence=0.9,
        estimated_gain=0.6,
    )
    (gpu_run,) = [r for r in waste(token).json()["runs_detail"] if r["run_id"] == GPU_RUN]
    assert gpu_run["top_fix"]["id"] == "dataloader.num_workers"


def test_project_prices_turn_hours_into_money(fleet: float, token: str, project: Any) -> None:
    from perfweb.fleet.services import gpu_price_set

    assert waste(token).json()["cost"] is None  # no price anywhere yet: hours only
    gpu_price_set(project=project, model="H100", price="3.6")
    report = waste(token).json()
    assert report["cost"]["total"] == pytest.approx(3.6 * 20 / 3600)
    assert report["cost"]["idle_holding_memory"] == pytest.approx(3.6 * 10 / 3600)
    (gpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == GPU_RUN]
    assert gpu_run["top_fix"]["recoverable_cost"] == pytest.approx(3.6 * 0.4 * 20 / 3600)


def test_it_groups_by_host_and_by_a_tag(fleet: float, token: str) -> None:
    report = waste(token).json()
    assert [g["host"] for g in report["hosts"]] == ["gpu-node-07"]
    groups = {g["value"]: g["runs"] for g in report["tag"]["groups"]}
    assert groups == {"ada": 1, "grace": 1}
    by_team = waste(token, "window=day&tag=team").json()["tag"]["groups"]
    assert [g["value"] for g in by_team] == ["(no team tag)"]


def test_runs_outside_the_window_and_other_projects_do_not_count(
    fleet: float, token: str, other_token: str
) -> None:
    assert waste(other_token).json()["runs"] == 0
    assert waste(token, "window=week").json()["runs"] == 2


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("window=year", "window is not one of day, week, month"),
        ("tag=a%20b", "tag is not a tag name"),
    ],
)
def test_a_bad_query_gets_one_line(token: str, query: str, message: str) -> None:
    reply = waste(token, query)
    assert reply.status_code == 400 and reply.json()["error"].startswith(message)


def test_the_fleet_page_shows_the_split_and_the_fix(fleet: float, owner: Any, project: Any) -> None:
    client = Client()
    assert client.login(username="owner", password=PASSWORD)
    page = client.get("/fleet/?window=day").content.decode()
    assert "idle holding memory" in page and "dataloader.num_workers" in page
    assert "2 runs" in page and "no GPU hours: 1.2 core-min of CPU" in page


def test_a_run_never_examined_is_never_given_an_all_clear(
    fleet: float, token: str, owner: Any
) -> None:
    """The CPU run has process samples only: no step, no trace, no GPU sample. Its page says
    "not examined"; the fleet says so too, never "no finding"."""
    report = waste(token).json()
    (cpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == CPU_RUN]
    assert cpu_run["top_fix"] is None
    assert cpu_run["coverage"]["verdict"] == "not_observed"
    assert cpu_run["coverage"]["headline"].startswith("Not examined")
    (gpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == GPU_RUN]
    assert gpu_run["coverage"]["verdict"] == "partly_observed"  # GPU samples, no step
    client = Client()
    assert client.login(username="owner", password=PASSWORD)
    page = client.get("/fleet/?window=day").content.decode()
    assert "nothing to say: not examined" in page and "no finding" not in page


def test_a_cpu_run_says_why_it_has_no_energy_and_what_its_fix_saves_in_core_time(
    fleet: float, token: str, owner: Any
) -> None:
    from perfweb.diagnostics.models import Finding
    from perfweb.runs.models import Run

    Finding.objects.create(
        run=Run.objects.get(run_id=CPU_RUN),
        rule_id="cpu.threads_too_few",
        rank=1,
        score=0.5,
        title="Use the cores",
        risk="data-path",
        confidence=0.9,
        estimated_gain=0.5,
    )
    report = waste(token).json()
    (cpu_run,) = [r for r in report["runs_detail"] if r["run_id"] == CPU_RUN]
    assert cpu_run["energy_kwh"] is None and "no energy counter" in cpu_run["energy_note"]
    assert cpu_run["top_fix"]["recoverable_core_hours"] == pytest.approx(0.5 * 2 * 36 / 3600)
    client = Client()
    assert client.login(username="owner", password=PASSWORD)
    page = client.get("/fleet/?window=day").content.decode()
    assert "<code>cpu.threads_too_few</code>: 0.6 core-min · 50% estimated" in page


def test_members_set_prices_and_outsiders_cannot(
    project: Any, owner: Any, outsider: Any, other_project: Any
) -> None:
    from perfweb.fleet.models import GpuPrice

    member = Client()
    assert member.login(username="owner", password=PASSWORD)
    reply = member.post("/fleet/prices", {"project": "vision", "model": "A100", "price": "1.29"})
    assert reply.status_code == 302
    assert GpuPrice.objects.get(project=project, model="A100").price_per_hour == 1.29
    bad = member.post("/fleet/prices", {"project": "vision", "model": "A100", "price": "-1"})
    assert bad.status_code == 400
    stranger = Client()
    assert stranger.login(username="outsider", password=PASSWORD)
    reply = stranger.post("/fleet/prices", {"project": "vision", "model": "A100", "price": "0"})
    assert reply.status_code == 404
    assert GpuPrice.objects.get(project=project, model="A100").price_per_hour == 1.29
    member.post("/fleet/prices", {"project": "vision", "model": "A100", "delete": "1"})
    assert not GpuPrice.objects.filter(project=project).exists()
