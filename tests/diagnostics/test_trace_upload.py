"""POST /api/v1/ingest/trace (docs/protocol.md): chunks joined, checked and kept once."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from perfweb.diagnostics.models import Trace
from perfweb_agent.delivery.traces import chunk_bodies
from tests.server.agent_client import Agent

from .conftest import trace_bytes, upload

pytestmark = pytest.mark.django_db
NAME = "rank0-step20-25"


def stored_file(trace_dir: Path, agent: Agent, name: str = NAME) -> Path:
    return trace_dir / agent.run_id / agent.agent_id / "traces" / f"{name}.pt.trace.json.gz"


def partial_files(trace_dir: Path) -> list[Path]:
    return [p for p in trace_dir.rglob("*") if p.is_file() and "traces" not in p.parts[-2:]]


def test_it_joins_chunks_sent_in_order_into_the_offline_layout(
    started: Agent, trace_dir: Path
) -> None:
    data = trace_bytes()
    replies = upload(started, data, chunk_bytes=40)
    assert [r.status_code for r in replies] == [200] * len(replies)
    assert len(replies) > 2
    assert [r.json()["complete"] for r in replies] == [False] * (len(replies) - 1) + [True]
    assert replies[-1].json() == {"ok": True, "complete": True, "commands": []}
    assert stored_file(trace_dir, started).read_bytes() == data
    trace = Trace.objects.get()
    assert (trace.run.run_id, trace.agent_id, trace.name) == (
        started.run_id,
        started.agent_id,
        NAME,
    )
    assert (trace.size, trace.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert trace.rank == 0
    assert partial_files(trace_dir) == []  # the staged chunks are gone


def test_it_joins_chunks_sent_out_of_order(started: Agent, trace_dir: Path) -> None:
    data = trace_bytes()
    count = -(-len(data) // 64)
    order = list(reversed(range(count)))
    replies = upload(started, data, chunk_bytes=64, order=order)
    assert [r.json()["complete"] for r in replies] == [False] * (count - 1) + [True]
    assert stored_file(trace_dir, started).read_bytes() == data


def test_it_stores_a_repeated_chunk_once(started: Agent, trace_dir: Path) -> None:
    data = trace_bytes()
    bodies = chunk_bodies(started.run_id, started.agent_id, NAME, data, chunk_bytes=128)
    assert started.post("trace", bodies[0]).json()["complete"] is False
    assert started.post("trace", bodies[0]).json()["complete"] is False
    for body in bodies[1:]:
        reply = started.post("trace", body)
    assert reply.json()["complete"] is True
    again = [started.post("trace", body) for body in bodies]  # the whole upload retried
    assert {r.status_code for r in again} == {200}
    assert {r.json()["complete"] for r in again} == {True}
    assert Trace.objects.count() == 1
    assert stored_file(trace_dir, started).read_bytes() == data


def test_it_rejects_chunks_that_do_not_match_the_sha256(started: Agent, trace_dir: Path) -> None:
    data = trace_bytes()
    bodies = chunk_bodies(started.run_id, started.agent_id, NAME, data, chunk_bytes=128)
    wrong = hashlib.sha256(b"something else").hexdigest()
    replies = [started.post("trace", {**body, "sha256": wrong}) for body in bodies]
    assert replies[-1].status_code == 400
    assert replies[-1].json() == {"error": "the joined chunks do not match sha256"}
    assert Trace.objects.count() == 0
    assert not stored_file(trace_dir, started).exists()
    assert partial_files(trace_dir) == []  # dropped: the client sends them again
    assert upload(started, data, chunk_bytes=128)[-1].json()["complete"] is True


def test_it_rejects_a_size_that_the_chunks_do_not_add_up_to(started: Agent) -> None:
    data = trace_bytes()
    [body] = chunk_bodies(started.run_id, started.agent_id, NAME, data)
    reply = started.post("trace", {**body, "size": len(data) + 1})
    assert reply.status_code == 400
    assert reply.json()["error"] == (
        f"data holds {len(data)} bytes, which is not chunk 0 of 1 equal chunks of a"
        f" {len(data) + 1}-byte file"
    )  # refused before it is staged
    assert Trace.objects.count() == 0


def test_it_rejects_a_file_that_is_not_gzip(started: Agent) -> None:
    reply = upload(started, b'{"traceEvents": []}')[-1]
    assert reply.status_code == 400
    assert reply.json() == {"error": "the trace is not gzip-compressed"}
    assert Trace.objects.count() == 0


def test_it_refuses_a_trace_over_the_cap(started: Agent, settings: Any, trace_dir: Path) -> None:
    settings.PERFWEB_TRACE_MAX_BYTES = 100
    data = trace_bytes() + bytes(200)
    reply = upload(started, data)[0]
    assert reply.status_code == 413
    assert reply.json() == {
        "error": f"the trace is {len(data)} bytes, over the server's cap of 100"
    }
    assert not trace_dir.exists() or not any(trace_dir.rglob("*.part"))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"name": "../../etc/passwd"}, r"name does not match ^[A-Za-z0-9_.-]{1,128}$"),
        ({"name": ".."}, "name is not a file name"),
        ({"chunk": 1}, "chunk is not below chunks (1)"),
        ({"chunk": -1}, "chunk is less than 0"),
        ({"chunks": "1"}, "chunks is not an integer"),
        ({"size": None}, "size is missing"),
        ({"sha256": "abc"}, "sha256 does not match ^[0-9a-fA-F]{64}$"),
        ({"encoding": "gzip"}, "encoding is not gzip+base64"),
        ({"data": "***"}, "data is not base64"),
        ({"data": ""}, "data is empty"),
        ({"sent_at": "now"}, "sent_at is not a number"),
        ({"run_id": "x"}, r"run_id does not match ^[A-Za-z0-9_-]{8,64}$"),
        ({"chunks": 2}, "chunks does not fit a size of"),
    ],
)
def test_it_rejects_a_bad_field_in_one_sentence(
    started: Agent, trace_dir: Path, change: dict[str, Any], error: str
) -> None:
    [body] = chunk_bodies(started.run_id, started.agent_id, NAME, trace_bytes())
    if change.get("chunks") == 2:
        change = {"chunks": len(base64.b64decode(body["data"])) + 1}
    reply = started.post("trace", {**body, **change})
    assert reply.status_code == 400
    assert reply.json()["error"].startswith(error)
    assert Trace.objects.count() == 0
    assert not trace_dir.exists() or not any(trace_dir.rglob("*.part"))


def test_it_refuses_a_name_already_stored_with_other_content(started: Agent) -> None:
    upload(started, trace_bytes())
    reply = upload(started, trace_bytes([{"ph": "X", "name": "x", "ts": 0, "dur": 1}]))[0]
    assert reply.status_code == 409
    assert reply.json() == {"error": f"trace {NAME} is already stored with another sha256"}


def test_it_answers_401_without_a_valid_token(started: Agent) -> None:
    stranger = Agent("not-a-token")
    assert upload(stranger, trace_bytes())[0].status_code == 401
    assert Trace.objects.count() == 0


def test_it_answers_404_for_a_run_of_another_project(started: Agent, other_token: str) -> None:
    intruder = Agent(other_token)  # same run id, another project's token
    reply = upload(intruder, trace_bytes())[0]
    assert reply.status_code == 404
    assert reply.json() == {"error": f"run {started.run_id} was not started in this project"}
    assert Trace.objects.count() == 0


def test_it_answers_404_for_a_run_never_started(agent: Agent) -> None:
    assert upload(agent, trace_bytes())[0].status_code == 404


def test_it_takes_only_post(started: Agent) -> None:
    reply = started.client.get("/api/v1/ingest/trace", HTTP_AUTHORIZATION=f"Bearer {started.token}")
    assert reply.status_code == 405


def test_it_takes_a_gzip_encoded_request(started: Agent, trace_dir: Path) -> None:
    [body] = chunk_bodies(started.run_id, started.agent_id, NAME, trace_bytes())
    reply = started.post("trace", body, gzipped=True)
    assert reply.json()["complete"] is True
    assert stored_file(trace_dir, started).is_file()


def test_deleting_the_run_removes_its_trace_files(
    started: Agent, trace_dir: Path, django_capture_on_commit_callbacks: Any
) -> None:
    upload(started, trace_bytes())
    assert stored_file(trace_dir, started).is_file()
    with django_capture_on_commit_callbacks(execute=True):
        Trace.objects.get().run.delete()
    assert not stored_file(trace_dir, started).exists()
