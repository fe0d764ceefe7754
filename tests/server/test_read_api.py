"""Read API v1: runs, a run, its series and its timeline — scoped to the caller's projects."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from perfweb.runs.models import Run

from .agent_client import RUN_ID, T0, Agent

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple"
OTHER_RUN = "aaaaaaaabbbbbbbbccccccccdddddddd"


def get(path: str, *, token: str | None = None, user: Any = None, status: int = 200) -> Any:
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if user is not None:
        client.force_login(user)
    response = client.get(path, **headers)
    assert response.status_code == status, response.content
    return response.json()


@pytest.fixture
def streamed(started: Agent) -> Agent:
    for seq in range(3):
        started.batch(seq=seq, start=T0 + 10 * seq)
    return started


def test_it_lists_the_projects_runs_for_a_token(streamed: Agent, token: str) -> None:
    [run] = get("/api/v1/runs", token=token)["runs"]
    assert run["id"] == RUN_ID and run["name"] == "resnet50-bs256"
    assert (run["status"], run["steps"], run["gpus"], run["host"]) == (
        "running",
        6,
        1,
        "gpu-node-07",
    )
    assert run["mean_gpu_utilization"] == pytest.approx(54.5)
    assert run["project"] == "vision" and run["started_at"] == T0
    for key in ("command", "ended_at", "exit_code", "last_seen_at", "duration_s"):
        assert key in run


def test_it_lists_newest_first_and_filters_by_status(started: Agent, token: str) -> None:
    newer = Agent(token, run_id=OTHER_RUN)
    newer.start(started_at=T0 + 60)
    newer.finish(exit_code=0)
    runs = get("/api/v1/runs", token=token)["runs"]
    assert [r["id"] for r in runs] == [OTHER_RUN, RUN_ID]
    assert [r["id"] for r in get("/api/v1/runs?status=running", token=token)["runs"]] == [RUN_ID]
    assert len(get("/api/v1/runs?limit=1", token=token)["runs"]) == 1
    get("/api/v1/runs?status=paused", token=token, status=400)
    get("/api/v1/runs?limit=0", token=token, status=400)


def test_it_shows_a_teammate_the_projects_runs(streamed: Agent, teammate: Any) -> None:
    assert [r["id"] for r in get("/api/v1/runs", user=teammate)["runs"]] == [RUN_ID]
    assert get(f"/api/v1/runs/{RUN_ID}", user=teammate)["id"] == RUN_ID


def test_it_hides_the_run_from_an_outsider(
    streamed: Agent, outsider: Any, other_token: str
) -> None:
    assert get("/api/v1/runs", user=outsider)["runs"] == []
    assert get("/api/v1/runs", token=other_token)["runs"] == []
    for path in ("", "/series?name=gpu.utilization", "/timeline"):
        get(f"/api/v1/runs/{RUN_ID}{path}", user=outsider, status=404)
        get(f"/api/v1/runs/{RUN_ID}{path}", token=other_token, status=404)


def test_it_answers_401_to_an_anonymous_caller(streamed: Agent) -> None:
    get("/api/v1/runs", status=401)
    get(f"/api/v1/runs/{RUN_ID}/timeline", status=401)
    get("/api/v1/runs", token="pw_wrong", status=401)


def test_it_describes_a_run(streamed: Agent, token: str) -> None:
    run = get(f"/api/v1/runs/{RUN_ID}", token=token)
    assert run["facts"] == {"torch.version": "2.13.0", "dataloader.0.num_workers": 0}
    assert run["tags"] == {"team": "vision"}
    assert [p["role"] for p in run["processes"]] == ["launcher"]
    assert [d["key"] for d in run["devices"]] == ["gpu:0"]
    series = {(s["device"], s["name"]): s for s in run["series"]}
    assert series["gpu:0", "gpu.utilization"] == {
        "device": "gpu:0",
        "name": "gpu.utilization",
        "unit": "%",
        "count": 30,
        "start": T0,
        "end": T0 + 29,
    }
    assert series["rank:0", "step.duration"]["count"] == 6


def test_it_serves_a_series_downsampled(streamed: Agent, token: str) -> None:
    answer = get(f"/api/v1/runs/{RUN_ID}/series?name=gpu.utilization&points=10", token=token)
    assert answer["run"] == RUN_ID and (answer["start"], answer["end"]) == (T0, T0 + 29)
    [series] = answer["series"]
    assert series["raw_count"] == 30 and series["downsampled"] is True
    assert len(series["t"]) == len(series["v"]) <= 10
    assert max(series["v"]) == 59.0 and min(series["v"]) == 50.0


def test_it_serves_a_time_range_in_full_when_it_is_short(streamed: Agent, token: str) -> None:
    query = f"name=gpu.utilization&device=gpu:0&start={T0 + 5}&end={T0 + 14}"
    path = f"/api/v1/runs/{RUN_ID}/series?{query}"
    [series] = get(path, token=token)["series"]
    assert series["raw_count"] == 10 and series["downsampled"] is False
    assert series["t"] == [T0 + i for i in range(5, 15)]


def test_it_serves_several_names_at_once(streamed: Agent, token: str) -> None:
    path = f"/api/v1/runs/{RUN_ID}/series?name=step.duration&name=step.data_wait"
    names = [s["name"] for s in get(path, token=token)["series"]]
    assert sorted(names) == ["step.data_wait", "step.duration"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "name is missing"),
        ("name=gpu.utilization&points=2", "points is not an integer from 3 to 10000"),
        ("name=gpu.utilization&points=10001", "points is not an integer from 3 to 10000"),
        ("name=gpu.utilization&start=yesterday", "start is not a number of Unix seconds"),
    ],
)
def test_it_rejects_a_bad_query(streamed: Agent, token: str, query: str, message: str) -> None:
    answer = get(f"/api/v1/runs/{RUN_ID}/series?{query}", token=token, status=400)
    assert answer["error"].startswith(message)


def test_it_serves_the_whole_timeline(streamed: Agent, token: str) -> None:
    answer = get(f"/api/v1/runs/{RUN_ID}/timeline?points=1000", token=token)
    keys = [(s["device"], s["name"]) for s in answer["series"]]
    assert keys == [
        ("gpu:0", "gpu.utilization"),
        ("process", "process.rss"),
        ("rank:0", "step.data_wait"),
        ("rank:0", "step.duration"),
    ]
    assert all(not s["downsampled"] for s in answer["series"])
    assert answer["series"][1]["unit"] == "bytes"


def test_it_serves_an_empty_timeline_for_a_run_without_samples(started: Agent, token: str) -> None:
    answer = get(f"/api/v1/runs/{RUN_ID}/timeline", token=token)
    assert answer == {"run": RUN_ID, "start": None, "end": None, "series": []}
    assert Run.objects.count() == 1
