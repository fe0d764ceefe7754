"""A stored profiler window is downloadable as the agent sent it, by the run's project only,
and its operator/kernel tables are stored with the diagnosis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from perfweb.diagnostics.models import Trace
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.runs.models import Run
from perfweb_recommender.analysis.trace_tables import trace_tables
from perfweb_recommender.trace.loader import load_trace
from tests.conftest import PASSWORD
from tests.server.agent_client import RUN_ID, Agent

from .conftest import PEER, trace_bytes, upload

pytestmark = pytest.mark.django_db

OP_EVENTS = [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000,
     "pid": 1, "tid": 1},
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 10, "dur": 500, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 20, "dur": 300, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 30, "dur": 10,
     "pid": 1, "tid": 1, "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "ts": 50, "dur": 200,
     "pid": 0, "tid": 7, "args": {"correlation": 7, "stream": 7}},
]  # fmt: skip


def logged_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.fixture
def stored(agent: Agent) -> tuple[Trace, bytes]:
    assert agent.start().status_code == 200
    data = trace_bytes(OP_EVENTS)
    assert all(r.status_code == 200 for r in upload(agent, data))
    return Trace.objects.get(), data


def _url(trace: Trace, run_id: str = RUN_ID) -> str:
    return f"/api/v1/runs/{run_id}/traces/{trace.id}"


def test_it_gives_the_owner_the_file_the_agent_sent(
    stored: tuple[Trace, bytes], owner: Any, tmp_path: Path
) -> None:
    trace, data = stored
    response = logged_in(owner).get(_url(trace))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/gzip"
    assert "Content-Encoding" not in response
    assert (
        f'filename="{RUN_ID}-rank0-step20-25.pt.trace.json.gz"' in response["Content-Disposition"]
    )
    body = b"".join(response.streaming_content)
    assert body == data
    saved = tmp_path / "downloaded.pt.trace.json.gz"
    saved.write_bytes(body)
    assert [s.number for s in load_trace(saved).steps] == [1]  # the recommender reads it back
    assert trace_tables(saved)["kernels"][0]["name"] == "ampere_sgemm_128x64_tn"


def test_it_gives_it_to_a_project_token(stored: tuple[Trace, bytes], token: str) -> None:
    trace, data = stored
    response = Client().get(_url(trace), HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data


def test_it_answers_404_to_another_project(
    stored: tuple[Trace, bytes], outsider: Any, other_token: str
) -> None:
    trace, _ = stored
    assert logged_in(outsider).get(_url(trace)).status_code == 404
    response = Client().get(_url(trace), HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert response.status_code == 404
    assert response.json() == {"error": "no such trace"}


def test_it_answers_404_for_a_trace_of_another_run(
    stored: tuple[Trace, bytes], token: str, owner: Any
) -> None:
    trace, _ = stored
    other = Agent(token, run_id="1" * 32, agent_id="2" * 32)
    assert other.start().status_code == 200
    assert logged_in(owner).get(_url(trace, run_id="1" * 32)).status_code == 404
    assert logged_in(owner).get(f"/api/v1/runs/{RUN_ID}/traces/{trace.id + 1}").status_code == 404


def test_it_asks_for_a_login(stored: tuple[Trace, bytes]) -> None:
    trace, _ = stored
    assert Client().get(_url(trace)).status_code == 401


def test_it_says_when_the_file_is_gone(
    stored: tuple[Trace, bytes], owner: Any, trace_dir: Path
) -> None:
    trace, _ = stored
    (trace_dir / trace.path).unlink()
    response = logged_in(owner).get(_url(trace))
    assert response.status_code == 410
    assert "no longer on the server" in response.json()["error"]


def test_it_stores_the_trace_tables_with_the_diagnosis(stored: tuple[Trace, bytes]) -> None:
    trace, _ = stored
    diagnose_run_task(Run.objects.get().id)
    tables = Trace.objects.get(id=trace.id).summary["tables"]
    ops = {row["name"]: row for row in tables["operators"]}
    assert ops["aten::linear"]["host_total_us"] == 500.0
    assert ops["aten::linear"]["host_self_us"] == 200.0  # minus aten::addmm inside it
    assert ops["aten::linear"]["device_self_us"] == 0.0
    assert ops["aten::linear"]["device_total_us"] == 200.0  # through aten::addmm's launch
    assert ops["aten::addmm"]["device_self_us"] == 200.0
    assert tables["kernels"] == [
        {
            "name": "ampere_sgemm_128x64_tn",
            "count": 1,
            "total_us": 200.0,
            "mean_us": 200.0,
            "share": 1.0,
            "tensor_cores": False,
        }
    ]
    assert tables["steps"] == 1


def test_it_lists_the_download_in_the_findings_api(stored: tuple[Trace, bytes], owner: Any) -> None:
    trace, _ = stored
    listed = logged_in(owner).get(f"/api/v1/runs/{RUN_ID}/findings").json()["traces"]
    assert listed[0]["download"] == _url(trace)


def test_it_shows_the_trace_tables_and_actions_on_the_run_page(
    stored: tuple[Trace, bytes], owner: Any
) -> None:
    trace, _ = stored
    diagnose_run_task(Run.objects.get().id)
    html = logged_in(owner).get(f"/runs/{RUN_ID}/").content.decode()
    assert 'data-testid="traces"' in html
    assert f'href="{_url(trace)}"' in html and 'data-action="perfetto"' in html
    assert 'data-testid="top-operators"' in html and "aten::linear" in html
    assert 'data-testid="top-kernels"' in html and "ampere_sgemm_128x64_tn" in html
    assert 'data-testid="step-breakdown"' in html


def test_the_run_page_may_open_the_perfetto_window(stored: tuple[Trace, bytes], owner: Any) -> None:
    page = logged_in(owner).get(f"/runs/{RUN_ID}/")
    assert page["Cross-Origin-Opener-Policy"] == "same-origin-allow-popups"


@pytest.mark.skipif(PEER is None, reason="../shared/peer-traces is not here")
def test_it_shows_a_real_gpu_traces_kernel_and_device_tables(agent: Agent, owner: Any) -> None:
    assert PEER is not None
    assert agent.start().status_code == 200
    data = (PEER / "hta" / "trace_diff" / "control" / "control.json.gz").read_bytes()
    assert all(r.status_code == 200 for r in upload(agent, data, name="control"))
    diagnose_run_task(Run.objects.get().id)
    html = logged_in(owner).get(f"/runs/{RUN_ID}/").content.decode()
    assert 'data-testid="top-kernels"' in html and 'data-testid="top-device-operators"' in html
    assert "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)" in html  # the longest
    assert "130.655" in html  # its total, ms: 130655 µs over 42 launches
    assert "3,110.8" in html  # its mean, µs
    assert "tensor cores: 15.0 % of kernel time" in html
