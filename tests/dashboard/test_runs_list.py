from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.dashboard.conftest import login, stream_run

pytestmark = pytest.mark.django_db


def test_it_lists_the_owners_runs_with_their_numbers(
    client: Client, owner: Any, vision_run: str
) -> None:
    page = login(client, owner).get("/").content.decode()
    assert "resnet50-bs256" in page
    assert f'href="/runs/{vision_run}/"' in page
    assert "trainer-01" in page
    assert "python train.py --epochs 3" in page
    assert "status-running" in page
    assert 'data-field="steps">30 steps<' in page
    assert 'data-field="gpus">2<' in page
    assert 'data-field="gpu-util">80%<' in page or 'data-field="gpu-util">81%<' in page


def test_it_lists_the_teams_runs_for_a_teammate(
    client: Client, teammate: Any, vision_run: str
) -> None:
    assert "resnet50-bs256" in login(client, teammate).get("/").content.decode()


def test_it_hides_other_projects_runs_from_an_outsider(
    client: Client, outsider: Any, vision_run: str, speech_run: str
) -> None:
    page = login(client, outsider).get("/").content.decode()
    assert "whisper-tiny" in page
    assert "resnet50-bs256" not in page
    assert vision_run not in page


def test_it_colours_each_status(client: Client, owner: Any, token: str) -> None:
    stream_run(token, run_id="ok-run-0001", name="ok", finish_with=0)
    stream_run(token, run_id="bad-run-0001", name="bad", finish_with=3)
    page = login(client, owner).get("/").content.decode()
    assert "status-finished" in page
    assert "status-failed" in page


def test_it_tells_a_newcomer_how_to_attach_an_agent(client: Client, owner: Any) -> None:
    page = login(client, owner).get("/").content.decode()
    assert "No runs yet" in page
    assert "perf-agent attach --server http://testserver --token" in page


def test_it_polls_the_read_api_from_the_page(client: Client, owner: Any) -> None:
    page = login(client, owner).get("/").content.decode()
    assert '"api": "/api/v1/runs"' in page
    assert "dashboard/js/runs.js" in page


def test_it_names_each_runs_project_for_a_member_of_several(
    client: Client, outsider: Any, token: str, vision_run: str, speech_run: str
) -> None:
    page = login(client, outsider).get("/").content.decode()
    assert 'class="project"' not in page  # one project: no project names
    assert '"showProject": false' in page

    from perfweb.projects.models import Project
    from perfweb.projects.services import membership_add

    membership_add(project=Project.objects.get(name="vision"), user=outsider)
    page = client.get("/").content.decode()
    assert '<span class="project">speech</span>' in page
    assert '<span class="project">vision</span>' in page
    assert '"showProject": true' in page


def test_it_filters_runs_by_status(client: Client, owner: Any, token: str) -> None:
    stream_run(token, run_id="ok-run-0001", name="the-good-one", finish_with=0)
    stream_run(token, run_id="bad-run-0001", name="the-bad-one", finish_with=3)
    login(client, owner)
    failed = client.get("/", {"status": "failed"}).content.decode()
    assert "the-bad-one" in failed and "the-good-one" not in failed
    assert '"status": "failed"' in failed  # the live poll keeps the filter
    assert "No running runs" in client.get("/", {"status": "running"}).content.decode()
    everything = client.get("/", {"status": "bogus"}).content.decode()
    assert "the-bad-one" in everything and "the-good-one" in everything


def test_it_counts_an_inference_runs_requests_and_says_what_each_run_was_examined_for(
    client: Client, owner: Any, token: str
) -> None:
    stream_run(token, run_id="serve-run-0001", name="serve", facts={"workload.kind": "inference"})
    stream_run(token, run_id="blind-run-0001", name="no-torch", steps=False)
    page = login(client, owner).get("/").content.decode()

    def row(run_id: str) -> str:
        return page.split(f'data-run-id="{run_id}"')[1].split("</tr>")[0]

    serve = row("serve-run-0001")
    assert 'data-field="steps">30 requests<' in serve
    assert '<span class="pill pill-observed">observed</span>' in serve
    blind = row("blind-run-0001")
    assert "pill-not_observed" in blind and ">not examined<" in blind
    assert 'data-field="steps">—<' in blind
    rows = {r["id"]: r for r in client.get("/api/v1/runs").json()["runs"]}
    assert rows["blind-run-0001"]["coverage"]["verdict"] == "not_observed"
    assert rows["serve-run-0001"]["coverage"]["unit"] == "request"
