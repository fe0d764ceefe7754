"""Ingest API v1 (docs/protocol.md): start, batch, heartbeat; validation; idempotency.

Runs against SQLite here and against PostgreSQL through test_postgresql.py.
"""

from __future__ import annotations

import gzip
import json
import math
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from perfweb.projects.models import IngestToken
from perfweb.projects.services import token_revoke
from perfweb.runs.models import BatchReceipt, Device, Run, RunProcess
from perfweb.series.models import Chunk, Series
from perfweb.series.selectors import series_read
from perfweb_contract import protocol
from perfweb_contract.protocol import pack_floats as packed

from .agent_client import AGENT_ID, RUN_ID, T0, Agent, batch_body

pytestmark = pytest.mark.django_db


def stored_counts(run: Run) -> dict[tuple[str, str], int]:
    return {(s.device, s.name): s.raw_count for s in series_read(run=run, points=10_000)}


def test_it_registers_a_run_and_its_process_on_start(agent: Agent) -> None:
    response = agent.start()
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "run": {"id": RUN_ID, "url": f"/runs/{RUN_ID}/"},
        "features": ["packed-arrays"],
        "commands": [],
    }
    run = Run.objects.get(run_id=RUN_ID)
    assert (run.name, run.status, run.host, run.command) == (
        "resnet50-bs256",
        "running",
        "gpu-node-07",
        ["python", "train.py", "--epochs", "3"],
    )
    assert run.started_at.timestamp() == T0
    assert run.facts == {"torch.version": "2.13.0"} and run.tags == {"team": "vision"}
    process = RunProcess.objects.get(run=run)
    assert (process.agent_id, process.role, process.rank, process.pid) == (
        AGENT_ID,
        "launcher",
        0,
        41233,
    )
    device = Device.objects.get(run=run)
    assert (device.key, device.kind, device.memory_total) == ("gpu:0", "gpu", 85520809984)


def test_it_is_idempotent_on_start(agent: Agent) -> None:
    assert agent.start().status_code == 200
    assert agent.start().status_code == 200
    assert (
        Run.objects.count() == 1 and RunProcess.objects.count() == 1 and Device.objects.count() == 1
    )


def test_it_adds_a_second_process_to_the_same_run(started: Agent, token: str) -> None:
    worker = Agent(token, agent_id="ffffffffffffffffffffffffffffffff")
    response = worker.start(role="worker", rank=1, command=["python", "train.py"], name="")
    assert response.status_code == 200
    run = Run.objects.get(run_id=RUN_ID)
    assert run.processes.count() == 2
    assert run.command == ["python", "train.py", "--epochs", "3"]  # the launcher's stays


def test_it_stores_a_batch(started: Agent) -> None:
    response = started.batch(n=10)
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "duplicate": False,
        "stored": {"samples": 20, "steps": 2},
        "commands": [],
    }
    run = Run.objects.get(run_id=RUN_ID)
    assert stored_counts(run) == {
        ("gpu:0", "gpu.utilization"): 10,
        ("process", "process.rss"): 10,
        ("rank:0", "step.duration"): 2,
        ("rank:0", "step.data_wait"): 2,
    }
    assert run.step_count == 2
    assert run.facts["dataloader.0.num_workers"] == 0


def test_it_keeps_values_and_times_exactly(started: Agent) -> None:
    times = [T0 + 0.123456789, T0 + 1.000000001, T0 + 0.5]  # unsorted, sub-microsecond
    values = [97.0, -3.25, 1e300]
    metrics = [{"device": "gpu:0", "name": "gpu.power", "t": times, "v": values}]
    assert started.batch(metrics=metrics, steps=None).status_code == 200
    [series] = series_read(run=Run.objects.get(), names=["gpu.power"])
    assert series.t.tolist() == sorted(times)
    assert series.v.tolist() == [97.0, 1e300, -3.25]


def test_it_stores_packed_arrays_exactly_as_plain_ones(agent: Agent) -> None:
    assert agent.start().json()["features"] == [protocol.FEATURE_PACKED_ARRAYS]
    times = [T0 + 0.123456789, T0 + 1.000000001, T0 + 0.5]
    values = [97.0, -0.0, 1e300]
    plain = batch_body(metrics=[{"device": "gpu:0", "name": "gpu.power", "t": times, "v": values}])
    body = json.loads(json.dumps(plain))
    body["metrics"][0].update(t=packed(times), v=packed(values))
    body["steps"].update({k: packed(body["steps"][k]) for k in ("index", "t", "duration")})
    response = agent.post("batch", body, gzipped=True)
    assert response.status_code == 200
    assert response.json()["stored"] == {"samples": 3, "steps": 2}
    run = Run.objects.get()
    [power] = series_read(run=run, names=["gpu.power"])
    assert power.t.tolist() == sorted(times)
    assert [math.copysign(1, v) for v in power.v.tolist()] == [1, 1, -1]  # -0.0 kept
    [duration] = series_read(run=run, names=["step.duration"])
    assert duration.v.tolist() == plain["steps"]["duration"]
    assert run.step_count == 2


def test_it_accepts_a_gzipped_batch(started: Agent) -> None:
    response = started.batch(gzipped=True)
    assert response.status_code == 200 and response.json()["stored"]["samples"] == 20


def test_it_stores_a_retried_batch_once(started: Agent) -> None:
    assert started.batch(seq=7).json()["duplicate"] is False
    again = started.batch(seq=7)
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert BatchReceipt.objects.count() == 1
    assert stored_counts(Run.objects.get())[("gpu:0", "gpu.utilization")] == 10
    assert Run.objects.get().step_count == 2


def test_it_stores_and_deduplicates_alike_once_its_statements_are_prepared(
    started: Agent,
) -> None:
    # On PostgreSQL the hot path's statements are prepared after a few runs on a connection
    # (perfweb.db.prepared_cursor), and psycopg keys them by the types its numbers dump to:
    # int2, int4 and int8 sequence numbers, each past the threshold.
    seqs = [*range(8), *range(40_000, 40_008), *range(3_000_000_000, 3_000_000_008)]
    assert [started.batch(seq=seq).json()["duplicate"] for seq in seqs] == [False] * len(seqs)
    assert [started.batch(seq=seq).json()["duplicate"] for seq in seqs] == [True] * len(seqs)
    assert sorted(BatchReceipt.objects.values_list("seq", flat=True)) == seqs
    assert stored_counts(Run.objects.get())[("gpu:0", "gpu.utilization")] == 10 * len(seqs)
    assert Run.objects.get().step_count == 2 * len(seqs)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            prepared = [row[0] for row in cursor.fetchall()]
        assert any("FOR UPDATE" in statement for statement in prepared)  # the bookkeeping
        assert any("t.digest" in statement for statement in prepared)  # the token


def test_it_keeps_batches_of_different_agents_apart(started: Agent, token: str) -> None:
    other = Agent(token, agent_id="ffffffffffffffffffffffffffffffff")
    assert started.batch(seq=0).json()["duplicate"] is False
    assert other.batch(seq=0).json()["duplicate"] is False
    assert stored_counts(Run.objects.get())[("gpu:0", "gpu.utilization")] == 20


def test_it_counts_steps_of_one_process_not_of_all_ranks(started: Agent, token: str) -> None:
    other = Agent(token, agent_id="ffffffffffffffffffffffffffffffff")
    started.batch()
    started.batch()
    other.batch(steps={"rank": 1, "index": [0], "t": [T0], "duration": [1.0], "data_wait": [0.0]})
    assert Run.objects.get().step_count == 4


def test_it_registers_an_agent_whose_start_it_never_saw(started: Agent, token: str) -> None:
    other = Agent(token, agent_id="ffffffffffffffffffffffffffffffff")
    started.batch()
    steps = {
        "rank": 1,
        "index": [0, 1, 2],
        "t": [T0] * 3,
        "duration": [1.0] * 3,
        "data_wait": [0.0] * 3,
    }
    assert other.batch(steps=steps, dropped=4).json()["duplicate"] is False
    process = RunProcess.objects.get(agent_id=other.agent_id)
    assert (process.role, process.step_count, process.dropped) == ("worker", 3, 4)
    assert Run.objects.get().step_count == 3
    assert other.batch(seq=0, steps=steps, dropped=4).json()["duplicate"] is True
    assert RunProcess.objects.get(agent_id=other.agent_id).step_count == 3


def test_it_keeps_the_most_an_agent_reported_dropped(started: Agent) -> None:
    started.batch(dropped=5)
    started.batch(dropped=2)  # counts only grow; an older one can arrive late
    assert RunProcess.objects.get().dropped == 5


def test_it_marks_the_run_and_the_process_seen(started: Agent) -> None:
    Run.objects.update(last_seen_at=Run.objects.get().started_at)
    RunProcess.objects.update(last_seen_at=RunProcess.objects.get().started_at)
    started.batch()
    run, process = Run.objects.get(), RunProcess.objects.get()
    assert run.last_seen_at > run.started_at and process.last_seen_at > process.started_at
    assert run.last_seen_at == process.last_seen_at


def test_it_upserts_devices_sent_in_a_batch(started: Agent) -> None:
    devices = [{"key": "gpu:0", "kind": "gpu", "name": "H200"}, {"key": "gpu:1", "kind": "gpu"}]
    assert started.batch(devices=devices).status_code == 200
    assert dict(Device.objects.values_list("key", "name")) == {"gpu:0": "H200", "gpu:1": ""}


def test_it_answers_a_heartbeat(started: Agent) -> None:
    before = Run.objects.get().last_seen_at
    response = started.heartbeat()
    assert response.status_code == 200
    assert response.json() == {"ok": True, "commands": []}
    assert Run.objects.get().last_seen_at > before


def bad(path: str, value: Any) -> Any:
    """A mutation of the default batch body: sets a dotted path (list indexes allowed)."""

    def mutate(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = body
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is DELETE:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value

    return mutate


DELETE = object()
REJECTIONS = [
    (bad("metrics.1.v.3", "x"), "metrics[1].v[3] is not a number"),
    (bad("metrics.1.v.3", None), "metrics[1].v[3] is not a number"),
    (bad("metrics.1.v.3", True), "metrics[1].v[3] is not a number"),
    (bad("metrics.0.t.2", "soon"), "metrics[0].t[2] is not a number"),
    (bad("metrics.0.t.2", -5.0), "metrics[0].t[2] is not a Unix time in seconds"),
    (bad("metrics.0.v", [1.0]), "metrics[0].v has 1 entries but metrics[0].t has 10"),
    (bad("metrics.0.v", 5), "metrics[0].v is not an array"),
    (bad("metrics.0.v", "many!"), "metrics[0].v is neither an array nor base64 of float64"),
    (bad("metrics.0.v", "many"), "metrics[0].v holds 3 bytes, not a whole number of float64"),
    (bad("metrics.0.v", packed([1.0] * 9 + [math.inf])), "metrics[0].v[9] is not a finite"),
    (bad("metrics.0.t", packed([T0, T0, -5.0] + [T0] * 7)), "metrics[0].t[2] is not a Unix time"),
    (bad("metrics.0.v", packed([1.0])), "metrics[0].v has 1 entries but metrics[0].t has 10"),
    (bad("steps.index", packed([0, 2.5])), "steps.index[1] is not an integer"),
    (bad("steps.duration", packed([-0.1, 0.5])), "steps.duration[0] is negative"),
    (bad("metrics.0.device", "GPU 0"), "metrics[0].device does not match"),
    (bad("metrics.0.name", "9lives"), "metrics[0].name does not match"),
    (bad("metrics.0.name", DELETE), "metrics[0].name is missing"),
    (bad("metrics.1", 5), "metrics[1] is not an object"),
    (bad("metrics", {}), "metrics is not an array"),
    (bad("run_id", "short"), "run_id does not match"),
    (bad("agent_id", DELETE), "agent_id is missing"),
    (bad("seq", -1), "seq is less than 0"),
    (bad("seq", 1.5), "seq is not an integer"),
    (bad("steps.index.1", 2.5), "steps.index[1] is not an integer"),
    (bad("steps.duration.0", -0.1), "steps.duration[0] is negative"),
    (bad("steps.data_wait", [0.1]), "steps.data_wait has 1 entries but steps.index has 2"),
    (bad("facts", {"nested": {"a": 1}}), "facts.nested is not a string, number, boolean or null"),
    (bad("devices.0", {"kind": "gpu"}), "devices[0].key is missing"),
    (bad("dropped", "some"), "dropped is not an integer"),
]


@pytest.mark.parametrize(("mutate", "message"), REJECTIONS)
def test_it_rejects_a_malformed_batch_whole(started: Agent, mutate: Any, message: str) -> None:
    body = batch_body(devices=[{"key": "gpu:1"}])
    mutate(body)
    response = started.post("batch", body)
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)
    assert_nothing_stored()


def assert_nothing_stored() -> None:
    assert BatchReceipt.objects.count() == 0
    assert Chunk.objects.count() == 0
    assert Series.objects.count() == 0
    assert Device.objects.filter(key="gpu:1").count() == 0
    assert Run.objects.get().step_count == 0


def test_it_accepts_the_corrected_batch_after_a_rejection(started: Agent) -> None:
    body = batch_body(seq=3)
    body["metrics"][1]["v"][9] = "oops"
    assert started.post("batch", body).status_code == 400
    response = started.batch(seq=3)
    assert response.json()["duplicate"] is False and response.json()["stored"]["samples"] == 20


def test_it_stores_nothing_when_storing_fails_half_way(
    started: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(**kwargs: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr("perfweb.ingest.batches.devices_upsert", explode)
    with pytest.raises(RuntimeError):
        started.batch()
    assert_nothing_stored()


_GZIPPED = gzip.compress(b'{"run_id": "r", "agent_id": "a", "seq": 1}' * 50, mtime=0)


def _flipped(blob: bytes, at: int) -> bytes:
    """`blob` with the lowest bit of its byte `at` flipped."""
    return blob[:at] + bytes([blob[at] ^ 1]) + blob[at:][1:]


@pytest.mark.parametrize(
    ("raw", "gzipped", "status", "message"),
    [
        (b"{not json", False, 400, "the body is not valid JSON"),
        (b"[1, 2]", False, 400, "the body is not an object"),
        (b"\x1f\x8b garbage", True, 400, "the body is not valid gzip"),
        (_flipped(_GZIPPED, -8), True, 400, "the body is not valid gzip"),  # CRC off by a bit
        (_flipped(_GZIPPED, -4), True, 400, "the body is not valid gzip"),  # length off by one
        (_GZIPPED[:-12], True, 400, "the body is not valid gzip (truncated)"),
    ],
)
def test_it_rejects_a_body_it_cannot_read(
    started: Agent, raw: bytes, gzipped: bool, status: int, message: str
) -> None:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {started.token}"}
    if gzipped:
        headers["HTTP_CONTENT_ENCODING"] = "gzip"
    response = started.client.post(
        "/api/v1/ingest/batch", data=raw, content_type="application/json", **headers
    )
    assert response.status_code == status
    assert response.json()["error"].startswith(message)


def test_it_rejects_a_body_over_the_wire_limit(started: Agent) -> None:
    response = started.post("batch", None, raw=b" " * (8 * 1024 * 1024 + 1))
    assert response.status_code == 413


def test_it_rejects_a_body_that_unzips_past_the_limit(started: Agent) -> None:
    bomb = gzip.compress(b" " * (64 * 1024 * 1024 + 1), 9)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {started.token}", "HTTP_CONTENT_ENCODING": "gzip"}
    response = started.client.post(
        "/api/v1/ingest/batch", data=bomb, content_type="application/json", **headers
    )
    assert response.status_code == 413


def test_it_rejects_an_unknown_content_encoding(started: Agent) -> None:
    response = started.client.post(
        "/api/v1/ingest/batch",
        data=json.dumps(batch_body()),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {started.token}",
        HTTP_CONTENT_ENCODING="br",
    )
    assert response.status_code == 415


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer pw_not-a-token", "Basic dXNlcjpw"])
def test_it_answers_401_without_a_valid_token(agent: Agent, header: str | None) -> None:
    headers = {} if header is None else {"HTTP_AUTHORIZATION": header}
    response = agent.client.post(
        "/api/v1/ingest/start", data=json.dumps({}), content_type="application/json", **headers
    )
    assert response.status_code == 401
    assert "token" in response.json()["error"]


def test_it_answers_401_to_a_revoked_token(started: Agent) -> None:
    token_revoke(token=IngestToken.objects.get())
    response = started.batch()
    assert response.status_code == 401
    assert Chunk.objects.count() == 0


def test_it_records_when_a_token_was_last_used(agent: Agent) -> None:
    assert IngestToken.objects.get().last_used_at is None
    agent.start()
    assert IngestToken.objects.get().last_used_at is not None


def test_it_keeps_only_the_hash_of_a_token(token: str) -> None:
    row = IngestToken.objects.get()
    assert token not in (row.digest, row.prefix) and len(row.digest) == 64


def test_it_answers_404_to_a_batch_for_a_run_never_started(agent: Agent) -> None:
    response = agent.batch()
    assert response.status_code == 404
    assert BatchReceipt.objects.count() == 0


def test_it_answers_404_when_another_project_writes_to_a_run(
    started: Agent, other_token: str
) -> None:
    intruder = Agent(other_token)
    assert intruder.batch().status_code == 404
    assert intruder.start().status_code == 404
    assert intruder.finish().status_code == 404
    assert Chunk.objects.count() == 0 and Run.objects.get().status == "running"


def test_it_answers_404_when_the_run_is_deleted_while_its_batch_arrives(
    started: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfweb.ingest import batches

    read = batches._run_and_series

    def read_then_delete(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        Run.objects.all().delete()
        return found

    monkeypatch.setattr(batches, "_run_and_series", read_then_delete)
    response = started.batch()
    assert response.status_code == 404
    assert response.json() == {"error": f"run {RUN_ID} was not started in this project"}
    assert BatchReceipt.objects.count() == 0 and Chunk.objects.count() == 0


def test_it_reads_a_run_and_its_series_from_the_database_once(started: Agent) -> None:
    def run_reads() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert started.batch().status_code == 200
        return sum("LEFT JOIN" in q["sql"] for q in queries.captured_queries)

    assert [run_reads(), run_reads(), run_reads()] == [1, 0, 0]
    assert BatchReceipt.objects.count() == 3 and Chunk.objects.count() == 12


def test_it_stores_into_a_run_started_again_after_it_was_deleted(started: Agent) -> None:
    assert started.batch().status_code == 200  # the run's ids are remembered now
    Run.objects.all().delete()
    assert started.start().status_code == 200  # a new run, same run_id, new ids
    assert started.batch().status_code == 200
    run = Run.objects.get()
    assert stored_counts(run)[("gpu:0", "gpu.utilization")] == 10
    assert BatchReceipt.objects.get().run == run


def test_it_stores_into_a_series_another_process_created(started: Agent) -> None:
    assert started.batch().status_code == 200  # remembers the run's series of this batch
    run = Run.objects.get()
    Series.objects.create(run=run, device="gpu:1", name="gpu.utilization")  # elsewhere
    extra = {"device": "gpu:1", "name": "gpu.utilization", "t": [T0 + 20], "v": [42.0]}
    metrics = [*batch_body()["metrics"], extra]
    assert started.batch(metrics=metrics).status_code == 200
    assert Series.objects.filter(device="gpu:1").count() == 1
    assert stored_counts(run)[("gpu:1", "gpu.utilization")] == 1


def test_it_remembers_no_series_of_a_batch_that_failed(
    started: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert started.batch().status_code == 200
    extra = {"device": "gpu:1", "name": "gpu.utilization", "t": [T0 + 20], "v": [42.0]}
    metrics = [*batch_body()["metrics"], extra]

    def explode(**kwargs: Any) -> None:
        raise RuntimeError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr("perfweb.ingest.batches.devices_upsert", explode)
        with pytest.raises(RuntimeError):
            started.batch(seq=1, metrics=metrics)  # creates gpu:1's series, rolled back
    assert not Series.objects.filter(device="gpu:1").exists()
    assert started.batch(seq=1, metrics=metrics).status_code == 200
    assert stored_counts(Run.objects.get())[("gpu:1", "gpu.utilization")] == 1


def test_it_only_accepts_post(agent: Agent) -> None:
    response = agent.client.get("/api/v1/ingest/batch", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert response.status_code == 405
