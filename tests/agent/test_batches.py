"""Batches: what the agent has to say, cut into envelopes in the order the server wants them
(start, batches, finish), each text cleaned, each batch numbered, nothing sent twice."""

from __future__ import annotations

import gzip
import json
from typing import Any

from perfweb_agent.core.config import load_settings
from perfweb_agent.delivery.batches import Batches, Delivery
from perfweb_contract import layout
from perfweb_contract.layout import Envelope

AGENT_ID = "a" * 32


def body(envelope: Envelope | None) -> dict[str, Any]:
    assert envelope is not None
    return json.loads(gzip.decompress(envelope.gz))


def make(**overrides: Any) -> Batches:
    settings = load_settings(env={}, offline="/nonexistent", **overrides)
    return Batches(
        settings,
        AGENT_ID,
        rank=3,
        start_body=lambda: {"run_id": settings.run_id, "name": "x\0"},
        finish_body=lambda: {"run_id": settings.run_id, "exit_code": 0, "final": True},
    )


def test_it_cuts_the_start_first_then_numbered_batches_then_the_finish_once() -> None:
    batches = make()
    batches.samples.add("process", "process.rss", 1.0, 2.0)
    start = batches.cut()
    assert start is not None and start.kind == layout.KIND_START
    assert body(start)["name"] == "x\ufffd"  # cleaned, and counted in the start's facts
    first, nothing = batches.cut(), batches.cut()
    assert first is not None and (first.kind, first.seq, first.samples) == (layout.KIND_BATCH, 0, 1)
    assert nothing is None  # nothing new to say
    batches.steps.add(7, 1.5, 0.25, 0.125)
    second = body(batches.cut())
    assert second["seq"] == 1 and second["steps"]["rank"] == 3 and second["steps"]["index"] == [7]
    finish = batches.cut(Delivery(dropped=4, rejected=1), final=True)
    assert finish is not None and finish.kind == layout.KIND_FINISH
    assert body(finish)["produced"] == {
        "samples": 1,
        "steps": 1,
        "dropped": 4,
        "rejected": 1,
        "sanitized": 1,
    }
    assert batches.cut(final=True) is None  # once


def test_a_batch_waits_until_due_unless_the_buffers_are_full() -> None:
    batches = make(max_batch_samples=3)
    batches.cut()  # the start
    batches.samples.add("process", "process.rss", 1.0, 2.0)
    assert batches.cut(due=False) is None
    batches.samples.add("process", "process.rss", 2.0, 2.0)
    batches.steps.add(1, 2.0, 0.1, 0.0)
    full = batches.cut(due=False)
    assert full is not None and full.samples == 3


def test_it_reports_what_delivery_knows_and_packs_arrays_when_the_server_reads_them() -> None:
    batches = make()
    batches.cut()
    batches.describe_devices([{"key": "gpu:0", "kind": "gpu"}])
    assert batches.devices == [{"key": "gpu:0", "kind": "gpu"}]
    batches.samples.add("process", "process.rss", 1.0, 2.0)
    sent = body(batches.cut(Delivery(packed=True, dropped=2, rejected=1, last_rejection="r")))
    assert sent["devices"] == [{"key": "gpu:0", "kind": "gpu"}] and batches.devices == []
    assert sent["dropped"] == 2
    assert sent["facts"]["agent.rejected_requests"] == 1
    assert sent["facts"]["agent.rejected_last"] == "r"
    assert sent["metrics"][0]["t"] != [1.0]  # packed (perfweb_contract.protocol)
    batches.facts.set("x", 1)
    again = body(batches.cut(Delivery(packed=True, dropped=2, rejected=1, last_rejection="r")))
    assert "agent.rejected_requests" not in again["facts"]  # counters are sent when they change
