"""Attribution on the server, from real recorded runs (tests/recommender/recorded_runs.py)
sent with `perf-agent upload`'s own code: the step count the run page and the read API show
leaves out an evaluation before the first optimizer step, and forked ranks count as ranks of
one host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from perfweb.diagnostics.comparison import run_steps
from perfweb.diagnostics.models import Finding
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.runs.models import Run
from perfweb_agent.delivery.upload import upload
from tests.conftest import PASSWORD
from tests.diagnostics.test_offline_parity import client_post
from tests.recommender.recorded_runs import Recorded, record

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Recorded]:
    runs: dict[str, Recorded] = {}

    def get(name: str) -> Recorded:
        if name not in runs:
            runs[name] = record(name, tmp_path_factory.mktemp(name))
        return runs[name]

    return get


def uploaded(folder: Path, token: str) -> Run:
    report = upload(str(folder), server="", token=token, post=client_post(Client()))
    assert not report.failed, report.failed
    return Run.objects.get()


def logged_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_an_evaluation_before_training_is_not_counted_as_steps_on_the_run_page(
    recording: Callable[[str], Recorded], token: str, owner: Any
) -> None:
    recorded = recording("two_loaders")  # 45 optimizer steps, an eval of 4 batches before them
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = uploaded(recorded.offline, token)
    assert run.step_count == 49  # stored as the agent counted them
    browser = logged_in(owner)
    row = browser.get(f"/api/v1/runs/{run.run_id}").json()
    assert (row["steps"], row["pre_training_calls"]) == (45, 4)
    html = browser.get(f"/runs/{run.run_id}/").content.decode()
    cell = html.partition('data-field="steps">')[2].partition("</dd>")[0]
    assert cell.startswith("45 ") and "4 evaluation or warm-up calls" in cell
    diagnose_run_task(run.id)
    coverage = browser.get(f"/api/v1/runs/{run.run_id}/findings").json()["coverage"]
    assert coverage["steps"] == 45 and coverage["pre_training_calls"] == 4
    _, durations, waits = run_steps(run=run)  # what the comparison page's medians read
    assert len(durations) == len(waits) == 45


@pytest.mark.parametrize("script", ["fork_ddp", "os_fork_ddp"])
def test_forked_ranks_on_one_host_get_no_multi_node_critical_on_the_server(
    recording: Callable[[str], Recorded], token: str, script: str
) -> None:
    recorded = recording(script)
    assert (recorded.returncode, recorded.stdout) == (0, "done\n"), recorded.stderr[-2000:]
    run = uploaded(recorded.offline, token)
    ranks = sorted(r for r in run.processes.values_list("rank", flat=True) if r is not None)
    assert ranks == [0, 1] and run.step_count == 12
    diagnose_run_task(run.id)
    found = list(Finding.objects.filter(run=run).values_list("rule_id", flat=True))
    assert "distributed.loopback_init" not in found, found


def test_a_run_that_trains_then_serves_shows_its_requests_on_the_run_page_and_the_api(
    recording: Callable[[str], Recorded], token: str, owner: Any
) -> None:
    recorded = recording("train_then_serve")  # 30 optimizer steps, then 20 requests
    assert (recorded.returncode, recorded.stdout) == (0, "done\n"), recorded.stderr[-2000:]
    run = uploaded(recorded.offline, token)
    browser = logged_in(owner)
    assert browser.get(f"/api/v1/runs/{run.run_id}").json()["steps"] == 30
    workload = browser.get(f"/api/v1/runs/{run.run_id}/workload").json()
    assert workload["kind"] == "training" and workload["requests"] is None
    assert workload["served"]["requests"] == 20 and workload["served"]["samples"] == 20
    assert workload["coverage"]["served_after_training"] == 20
    html = browser.get(f"/runs/{run.run_id}/").content.decode()
    panel = html.partition('data-testid="served"')[2].partition("</section>")[0]
    assert "Requests after training" in panel
    assert "<dt>Requests</dt><dd>20</dd>" in panel and 'data-field="untimed"' not in panel


def test_a_copy_of_the_model_that_serves_is_listed_as_not_seen_on_the_run_page(
    recording: Callable[[str], Recorded], token: str, owner: Any
) -> None:
    recorded = recording("train_then_serve_a_copy")
    assert (recorded.returncode, recorded.stdout) == (0, "done\n"), recorded.stderr[-2000:]
    run = uploaded(recorded.offline, token)
    browser = logged_in(owner)
    workload = browser.get(f"/api/v1/runs/{run.run_id}/workload").json()
    assert workload["served"] is None
    coverage = workload["coverage"]
    assert coverage["untimed_after_training"] == 20
    assert "requests after training" in coverage["not_seen"]
    assert any(m.startswith("requests after training: 20 calls") for m in coverage["missing"])
    html = browser.get(f"/runs/{run.run_id}/").content.decode()
    panel = html.partition('data-testid="served"')[2].partition("</section>")[0]
    assert 'data-field="untimed"' in panel and "20 calls of another copy" in panel
