"""One bad value never costs a run: what no server stores is cleaned before it is sent, and
a request the server refuses for good is counted and passed, never retried forever."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from perfweb_agent.core import sanitize
from perfweb_agent.core.sanitize import REPLACEMENT, Sanitizer
from perfweb_contract import protocol
from tests.agent.fakeserver import FakeServer
from tests.agent.test_sender import assert_exactly_once, finish_body, make_sender, start_body

NUL, SURROGATE = "\x00", "\udcff"  # a lone surrogate: a non-UTF-8 byte under surrogateescape


def all_text(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *all_text(v)]]
    if isinstance(value, list):
        return [s for item in value for s in all_text(item)]
    return []


def values(array: list[float] | str) -> list[float]:
    """A batch array, packed or not."""
    return protocol.unpack_floats(array) if isinstance(array, str) else array


def storable(value: Any) -> bool:
    """What PostgreSQL can store: no NUL, nothing that is not valid UTF-8."""
    for text in all_text(value):
        if NUL in text:
            return False
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


def test_it_cleans_every_text_field_of_a_start_and_says_which() -> None:
    sanitizer = Sanitizer()
    body = {
        "run_id": "r" * 32,
        "agent_id": "a" * 32,
        "name": f"resnet{NUL}50",
        "command": ["python", f"train{SURROGATE}.py"],
        "cwd": f"/data/{SURROGATE}",
        "host": f"gpu{NUL}node",
        "started_at": 1.0,
        "pid": 7,
        "tags": {"dataset": f"imagenet{NUL}v2", f"k{NUL}": "v"},
        "facts": {"python.version": "3.12", "x": f"{SURROGATE}"},
        "devices": [{"key": "gpu:0", "name": f"H100{NUL}", "memory_total": 80}],
    }
    clean = sanitizer.body(body, limits=sanitize.START_LENGTHS)
    assert storable(clean)
    assert clean["tags"]["dataset"] == f"imagenet{REPLACEMENT}v2"
    assert clean["tags"][f"k{REPLACEMENT}"] == "v"
    assert clean["command"] == ["python", f"train{REPLACEMENT}.py"]
    assert clean["pid"] == 7 and clean["started_at"] == 1.0
    assert clean["devices"][0]["memory_total"] == 80
    assert sanitizer.count == 8
    fields = sanitizer.facts()[sanitize.FACT_FIELDS].split(",")
    assert {"name", "command", "cwd", "host", "tags.dataset", "facts.x"} <= set(fields)


def test_it_cuts_text_to_the_servers_limits_and_fits_names_to_their_patterns() -> None:
    sanitizer = Sanitizer()
    clean = sanitizer.body({"name": "n" * 500, "host": "h" * 300}, limits=sanitize.START_LENGTHS)
    assert len(clean["name"]) == 200 and len(clean["host"]) == 255
    assert sanitizer.series_key("gpu:0", "gpu.utilization") == ("gpu:0", "gpu.utilization")
    assert sanitizer.series_key(f"GPU{NUL}0", "My Metric!") == ("gpu_0", "my_metric_")
    assert sanitizer.series_key("", "9lives") == ("device_", "m_9lives")
    assert sanitizer.device({"key": f"gpu {NUL}", "kind": "k" * 40})["kind"] == "k" * 16
    assert sanitizer.count == 6


def test_a_tag_with_a_nul_reaches_the_server_cleaned_with_its_samples(
    server: FakeServer, tmp_path: Path
) -> None:
    server.refuse = lambda path, body: None if storable(body) else "not storable"
    sender, producer = make_sender(server, tmp_path)
    sender.facts.set("dataloader.0.dataset", f"Images{NUL}")
    sender.samples.add(f"gpu{NUL}0", "gpu.utilization", time.time(), 50.0)
    body = {**start_body(sender), "tags": {"dataset": f"imagenet{NUL}v2"}, "cwd": SURROGATE}
    sender.start(body)
    time.sleep(0.4)
    sender.close(finish_body(sender), 3.0)
    assert server.refused == []
    start = server.store.starts[sender.agent_id]
    assert start["tags"] == {"dataset": f"imagenet{REPLACEMENT}v2"}
    assert start["facts"][sanitize.FACT_COUNT] == 2
    assert server.store.metric("gpu_0", "gpu.utilization") == [50.0]
    facts = server.store.facts()
    assert facts["dataloader.0.dataset"] == f"Images{REPLACEMENT}"
    assert facts[sanitize.FACT_COUNT] == 4  # the start's two, a fact and a device name
    assert_exactly_once(server, producer)


def test_a_batch_refused_for_good_is_counted_and_the_next_ones_go_on(
    server: FakeServer, tmp_path: Path
) -> None:
    def refuse(path: str, body: dict[str, Any]) -> str | None:
        refused = path.endswith("/batch") and body.get("seq") == 1
        return "metrics[0].v[0] is not a number" if refused else None

    server.refuse = refuse
    sender, producer = make_sender(server, tmp_path)
    sender.start(start_body(sender))
    time.sleep(0.6)
    sender.close(finish_body(sender), 3.0)
    assert [body["seq"] for _, body in server.refused] == [1]  # once: not retried
    seqs = sorted(seq for _, _, seq in server.store.batches)
    assert seqs[0] == 0 and seqs[1] == 2 and len(seqs) >= 3  # the rest went on
    facts = server.store.facts()
    assert facts["agent.rejected_requests"] == 1
    assert facts["agent.rejected_last"] == "batch 1: 400 metrics[0].v[0] is not a number"
    refused = server.refused[0][1]
    lost = sum(len(values(m["v"])) for m in refused["metrics"])
    last = server.store.batches[max(server.store.batches)]
    assert last["dropped"] == lost  # the refused samples are counted as dropped
    assert len(server.store.metric("process", "process.rss")) + lost == producer.produced


def test_a_start_refused_for_good_is_sent_again_without_its_free_text(
    server: FakeServer, tmp_path: Path
) -> None:
    server.refuse = lambda path, body: "name is too odd" if "name" in body else None
    sender, producer = make_sender(server, tmp_path)
    sender.start({**start_body(sender), "name": "odd", "command": ["python", "x.py"]})
    time.sleep(0.4)
    sender.close(finish_body(sender), 3.0)
    start = server.store.starts[sender.agent_id]
    assert "name" not in start and "command" not in start
    assert start["role"] == "worker"
    assert start["facts"] == {"agent.start_refused": "start: 400 name is too odd"}
    assert_exactly_once(server, producer)  # the run and all its samples are stored
    assert json.loads(json.dumps(server.store.facts()))["agent.rejected_requests"] == 1


def test_a_409_to_start_means_the_run_is_there_and_sending_goes_on(
    server: FakeServer, tmp_path: Path
) -> None:
    server.refuse = lambda path, body: "run has a launcher" if path.endswith("/start") else None
    server.refuse_status = 409
    sender, producer = make_sender(server, tmp_path)
    sender.start(start_body(sender))
    time.sleep(0.4)
    sender.close(finish_body(sender), 3.0)
    assert len(server.refused) == 1  # not retried, not stripped and sent again
    assert sender.rejected == 0 and "agent.rejected_requests" not in server.store.facts()
    assert_exactly_once(server, producer)
