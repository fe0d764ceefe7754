"""Unfinished trace uploads are bounded (issue 16): in bytes per run and per project, and in
time from their first chunk; what is over a bound is a 413 and stores nothing; stale
partial uploads are cleaned."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from perfweb.diagnostics import uploads
from perfweb.diagnostics.models import Trace
from perfweb.diagnostics.tasks import diagnose_sweep_task
from perfweb_agent.delivery.traces import chunk_bodies
from tests.server.agent_client import Agent
from tests.server.snapshot import stored_state

from .conftest import trace_bytes

pytestmark = pytest.mark.django_db
OTHER_RUN = "aaaaaaaabbbbbbbbccccccccdddddddd"


def first_chunk(agent: Agent, data: bytes, name: str) -> Any:
    """Posts the first of `data`'s chunks (of 64 bytes): an upload begun, not finished."""
    return agent.post("trace", chunk_bodies(agent.run_id, agent.agent_id, name, data, 64)[0])


def partial_sizes(trace_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in trace_dir.glob("*/*/.partial/*/*"))


def test_it_refuses_an_upload_that_would_take_the_run_over_its_quota(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_RUN_BYTES = 2 * len(data) + 10
    assert first_chunk(started, data, "w1").status_code == 200
    assert first_chunk(started, data, "w2").status_code == 200
    before = stored_state(trace_dir)
    response = first_chunk(started, data, "w3")
    assert response.status_code == 413
    assert response.json() == {
        "error": f"run {started.run_id}'s unfinished trace uploads would declare"
        f" {3 * len(data)} bytes, over its quota of {2 * len(data) + 10}"
    }
    assert stored_state(trace_dir) == before
    assert partial_sizes(trace_dir) == [len(data)] * 2


def test_further_chunks_of_an_upload_already_counted_are_taken(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_RUN_BYTES = len(data)  # exactly one upload in flight
    bodies = chunk_bodies(started.run_id, started.agent_id, "w1", data, 64)
    assert [started.post("trace", b).status_code for b in bodies] == [200] * len(bodies)
    assert Trace.objects.get().name == "w1"
    # the finished upload no longer counts: the next one is taken
    assert first_chunk(started, data, "w2").status_code == 200


def test_it_refuses_an_upload_that_would_take_the_project_over_its_quota(
    started: Agent, token: str, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_PROJECT_BYTES = len(data) + 10
    other = Agent(token, run_id=OTHER_RUN)
    assert other.start().status_code == 200
    assert first_chunk(started, data, "w1").status_code == 200
    response = first_chunk(other, data, "w1")
    assert response.status_code == 413
    assert response.json()["error"] == (
        f"the project's unfinished trace uploads would declare {2 * len(data)} bytes,"
        f" over its quota of {len(data) + 10}"
    )
    assert partial_sizes(trace_dir) == [len(data)]


def test_another_projects_uploads_do_not_count(
    started: Agent, other_token: str, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_PROJECT_BYTES = len(data) + 10
    outsider = Agent(other_token, run_id=OTHER_RUN)
    assert outsider.start().status_code == 200
    assert first_chunk(outsider, data, "w1").status_code == 200
    assert first_chunk(started, data, "w1").status_code == 200


def age(trace_dir: Path, seconds: float) -> None:
    """Moves every staged upload's first-chunk time `seconds` into the past."""
    for marker in trace_dir.glob("*/*/.partial/*/*/.begun"):
        then = time.time() - seconds
        os.utime(marker, (then, then))


def test_an_upload_past_its_time_is_dropped_and_no_longer_counts(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_RUN_BYTES = len(data)
    settings.PERFWEB_TRACE_PARTIAL_TTL = 3600
    assert first_chunk(started, data, "w1").status_code == 200
    assert first_chunk(started, data, "w2").status_code == 413
    age(trace_dir, 3601)
    assert first_chunk(started, data, "w2").status_code == 200
    assert [p.parent.name for p in trace_dir.glob("*/*/.partial/*/*")] == ["w2"]


def test_resending_chunks_does_not_keep_an_upload_alive(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_TTL = 3600
    bodies = chunk_bodies(started.run_id, started.agent_id, "w1", data, 64)
    assert started.post("trace", bodies[0]).status_code == 200
    age(trace_dir, 3000)
    assert started.post("trace", bodies[0]).status_code == 200  # touched again, not renewed
    (folder,) = trace_dir.glob("*/*/.partial/*/*")
    assert time.time() - uploads.begun_at(folder) >= 3000
    assert uploads.staging_sweep(older_than_s=3600, now=time.time() + 601) == 1
    assert partial_sizes(trace_dir) == []


def test_beats_sweep_removes_stale_partial_uploads_of_every_run(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    data = trace_bytes()
    settings.PERFWEB_TRACE_PARTIAL_TTL = 3600
    assert first_chunk(started, data, "old").status_code == 200
    age(trace_dir, 3601)
    assert first_chunk(started, data, "new").status_code == 200  # begun now
    diagnose_sweep_task()
    assert [p.parent.name for p in trace_dir.glob("*/*/.partial/*/*")] == ["new"]
