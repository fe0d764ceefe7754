from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.dashboard.conftest import login, stream_run

pytestmark = pytest.mark.django_db


def page_config(html: str) -> dict[str, Any]:
    start = html.index('<script id="page-config" type="application/json">')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


def test_it_shows_the_run_header_to_the_owner(client: Client, owner: Any, vision_run: str) -> None:
    response = login(client, owner).get(f"/runs/{vision_run}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "resnet50-bs256" in page
    assert "python train.py --epochs 3" in page
    assert "trainer-01" in page
    assert "status-running" in page
    assert 'data-field="steps">30<' in page
    assert "torch.version" in page and "2.13.0" in page  # facts
    assert "NVIDIA H100 80GB HBM3" in page  # devices
    assert "launcher" in page and "pid 4242 on trainer-01" in page  # processes


def test_it_shows_the_run_to_a_teammate(client: Client, teammate: Any, vision_run: str) -> None:
    assert login(client, teammate).get(f"/runs/{vision_run}/").status_code == 200


def test_it_answers_404_to_an_outsider(client: Client, outsider: Any, vision_run: str) -> None:
    response = login(client, outsider).get(f"/runs/{vision_run}/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "a project you are not a member of" in page
    assert "resnet50-bs256" not in page


def test_it_answers_404_for_an_unknown_run(client: Client, owner: Any) -> None:
    assert login(client, owner).get("/runs/no-such-run-0001/").status_code == 404


def test_it_shows_the_exit_code_of_a_failed_run(client: Client, owner: Any, token: str) -> None:
    stream_run(token, run_id="bad-run-0001", name="bad", finish_with=3)
    page = login(client, owner).get("/runs/bad-run-0001/").content.decode()
    assert "status-failed" in page
    assert 'data-field="exit-code">3<' in page


def test_it_configures_the_timeline_for_this_run(
    client: Client, owner: Any, vision_run: str
) -> None:
    config = page_config(login(client, owner).get(f"/runs/{vision_run}/").content.decode())
    assert config["api"] == f"/api/v1/runs/{vision_run}"
    assert config["status"] == "running"
    assert config["gpus"] == 2
    rows = {row["key"]: row for row in config["rows"]}
    assert rows["gpu_util"]["metrics"] == ["gpu.utilization"]
    assert rows["steps"]["metrics"] == ["step.duration", "step.data_wait"]
    assert set(rows) == {
        "gpu_util",
        "gpu_memory",
        "gpu_power",
        "gpu_temperature",
        "cpu",
        "host_cpu",
        "rss",
        "steps",
        "anatomy",
    }
    assert rows["anatomy"]["metrics"][0] == "step.phase.data"  # stacked, data first
    assert rows["host_cpu"]["metrics"] == ["host.cpu_percent"]  # other jobs' CPU, beside ours
    assert rows["host_cpu"]["max_value"] == 100.0
    # the script's scalars get a row each (up to 16), its phases shade every row
    assert config["extras"] == {
        "scalarPrefix": "scalar.",
        "scalarRowsMax": 16,
        "phaseSeries": "run.phase",
        "phases": {"0": "none", "1": "train", "2": "eval", "3": "test", "4": "predict"},
    }


def test_its_timeline_api_serves_the_session_the_charted_series(
    client: Client, teammate: Any, vision_run: str
) -> None:
    login(client, teammate)
    data = client.get(f"/api/v1/runs/{vision_run}/timeline", {"points": 1000}).json()
    got = {(s["device"], s["name"]): len(s["t"]) for s in data["series"]}
    assert got[("gpu:1", "gpu.utilization")] == 30
    assert got[("process", "process.rss")] == 30
    assert got[("workers", "process.cpu_percent")] == 30
    assert got[("rank:0", "step.duration")] == 30
    assert got[("rank:0", "step.data_wait")] == 30


def test_its_timeline_api_answers_404_to_an_outsiders_session(
    client: Client, outsider: Any, vision_run: str
) -> None:
    login(client, outsider)
    assert client.get(f"/api/v1/runs/{vision_run}/timeline").status_code == 404
    assert vision_run not in client.get("/api/v1/runs").content.decode()


def test_it_loads_plotly_from_this_server_only(client: Client, owner: Any, vision_run: str) -> None:
    page = login(client, owner).get(f"/runs/{vision_run}/").content.decode()
    assert "/assets/plotly-" in page
    assert "cdn" not in page.lower()
    assert "https://" not in page and "http://" not in page
