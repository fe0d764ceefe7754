"""A run's and a project's traces are bounded. Unfinished uploads (issue 16): in bytes per
run and per project, and in time from their first chunk; stale partial uploads are cleaned.
Finished and unfinished together (issue 27): in number and bytes per run and per project;
each chunk's length is its place in the declared file, so the bytes on disk are what the
quotas count. What is over a bound is a 4xx and stores nothing."""

from __future__ import annotations

import gzip
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from perfweb.diagnostics import quotas, uploads
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


# --- issue 27: bytes on disk are what the quotas count -----------------------------------
def staged_bytes(trace_dir: Path) -> int:
    return sum(p.stat().st_size for p in trace_dir.glob("*/*/.partial/*/*/*.part"))


def chunk_of(agent: Agent, *, data: bytes, chunk: int, chunks: int, size: int) -> dict[str, Any]:
    """A chunk body at index `chunk` of a declared upload, carrying `data`."""
    [body] = chunk_bodies(agent.run_id, agent.agent_id, "probe", data, len(data))
    return {**body, "chunk": chunk, "chunks": chunks, "size": size, "sha256": "ab" * 32}


MISPLACED = [  # (chunk, chunks, size, length)
    (0, 1, 100, 99),  # one chunk is the whole file
    (0, 4, 100, 24),  # four chunks of 24 hold 96 at most
    (0, 4, 100, 34),  # three of 34 already pass 100
    (3, 4, 100, 26),  # a last chunk longer than the others would be
    (3, 4, 100, 11),  # 89 is not three equal chunks
]


def test_it_refuses_a_chunk_that_is_not_its_place_in_the_declared_file(
    started: Agent, trace_dir: Path
) -> None:
    before = stored_state(trace_dir)
    for chunk, chunks, size, length in MISPLACED:
        body = chunk_of(started, data=bytes(length), chunk=chunk, chunks=chunks, size=size)
        reply = started.post("trace", body)
        assert reply.status_code == 400
        assert reply.json()["error"] == (
            f"data holds {length} bytes, which is not chunk {chunk} of {chunks} equal chunks"
            f" of a {size}-byte file"
        )
        assert stored_state(trace_dir) == before
    for chunk, length in ((0, 25), (3, 25), (0, 33), (3, 1)):  # strides of 25 and 33 fit
        body = chunk_of(started, data=bytes(length), chunk=chunk, chunks=4, size=100)
        assert started.post("trace", body).status_code == 200


def test_bytes_on_disk_never_exceed_what_the_quota_counts(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    """The probe's attack, scaled down: the chunks of one declared upload sent at many
    lengths, gzip-compressed (the issue put 83.9 MB on disk for 4 MiB counted)."""
    size, chunks = 100, 4  # full chunks of 25..33 bytes fit; each length is another upload
    settings.PERFWEB_TRACE_PARTIAL_RUN_BYTES = 3 * size  # three uploads in flight
    statuses: Counter[int] = Counter()
    for length in (1, 24, 25, 26, 27, 28, 33, 34, 100):
        for index in range(chunks - 1):  # never the last: no upload completes
            body = chunk_of(started, data=bytes(length), chunk=index, chunks=chunks, size=size)
            statuses[started.post("trace", body, gzipped=True).status_code] += 1
    folders = list(trace_dir.glob("*/*/.partial/*/*"))
    assert statuses == {200: 9, 413: 6, 400: 12}
    assert len(folders) == 3
    for folder in folders:  # each upload holds at most what it declared
        assert sum(p.stat().st_size for p in folder.glob("*.part")) <= size
    assert staged_bytes(trace_dir) <= sum(p.size for p in quotas.partials()) == 3 * size


def test_a_gzip_encoded_chunk_unzips_to_no_more_than_a_plain_one(
    started: Agent, trace_dir: Path
) -> None:
    body = {**chunk_of(started, data=b"x", chunk=0, chunks=1, size=1), "data": "A" * (9 << 20)}
    before = stored_state(trace_dir)
    reply = started.post("trace", body, gzipped=True)
    assert reply.status_code == 413
    assert reply.json()["error"] == f"the body is larger than {8 << 20} bytes unzipped"
    assert stored_state(trace_dir) == before


def finished(agent: Agent, name: str) -> Any:
    """Uploads one whole trace (one chunk) named `name`; the reply."""
    data = gzip.compress(json.dumps({"traceEvents": [], "name": name}).encode(), mtime=0)
    return agent.post("trace", chunk_bodies(agent.run_id, agent.agent_id, name, data)[0])


def test_it_refuses_a_trace_past_the_runs_limit_of_traces_finished_or_not(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    settings.PERFWEB_TRACE_RUN_MAX = 2
    assert finished(started, "w1").json()["complete"] is True
    assert first_chunk(started, trace_bytes(), "w2").status_code == 200  # staged counts too
    before = stored_state(trace_dir)
    reply = finished(started, "w3")
    assert reply.status_code == 413
    assert reply.json() == {
        "error": f"run {started.run_id} would hold 3 traces, over its limit of 2"
    }
    assert stored_state(trace_dir) == before
    assert finished(started, "w1").json()["complete"] is True  # a retried upload still is


def test_it_refuses_a_trace_past_the_runs_bytes(
    started: Agent, settings: Any, trace_dir: Path
) -> None:
    assert finished(started, "w1").status_code == 200
    held = Trace.objects.get().size
    settings.PERFWEB_TRACE_RUN_BYTES = held + 10
    reply = finished(started, "w2")
    assert reply.status_code == 413
    assert reply.json()["error"].startswith(f"run {started.run_id}'s traces would hold ")
    assert reply.json()["error"].endswith(f" bytes, over its quota of {held + 10}")
    assert Trace.objects.count() == 1


def test_a_projects_traces_are_bounded_across_its_runs_and_not_by_others(
    started: Agent, token: str, other_token: str, settings: Any, trace_dir: Path
) -> None:
    settings.PERFWEB_TRACE_PROJECT_MAX = 2
    other = Agent(token, run_id=OTHER_RUN)
    outsider = Agent(other_token, run_id="eeeeeeeeffffffff0000000011111111")
    assert other.start().status_code == 200 and outsider.start().status_code == 200
    assert finished(started, "w1").status_code == 200
    assert finished(other, "w1").status_code == 200
    reply = finished(other, "w2")
    assert reply.status_code == 413
    assert reply.json() == {"error": "the project would hold 3 traces, over its limit of 2"}
    for name in ("w1", "w2"):  # another project's count is its own
        assert finished(outsider, name).status_code == 200
    settings.PERFWEB_TRACE_PROJECT_MAX = 100
    settings.PERFWEB_TRACE_PROJECT_BYTES = sum(
        Trace.objects.filter(run__project__name="vision").values_list("size", flat=True)
    )
    reply = finished(other, "w2")
    assert reply.status_code == 413
    assert reply.json()["error"].startswith("the project's traces would hold ")
