"""The sender against a loopback server that is down, slow, failing or rate-limiting.

Whatever the server does, every sample produced arrives exactly once once it is healthy.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfweb_agent.core.config import Settings, load_settings
from perfweb_agent.delivery import transport
from perfweb_agent.delivery.batches import Batches
from perfweb_agent.delivery.sender import Sender
from perfweb_agent.delivery.upload import upload
from tests.agent.fakeserver import TOKEN, FakeServer


class Rig:
    """A Sender and the Batches it sends, wired as the agent wires them (next_batch, post,
    tick), with the start and finish bodies a test gives; the tick is the test's to set."""

    def __init__(
        self,
        settings: Settings,
        agent_id: str,
        *,
        post: transport.PostFn = transport.post,
        clock: Callable[[], float] = time.monotonic,
        on_command: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.tick: Callable[[], None] = lambda: None
        self._start: dict[str, Any] = {}
        self._finish: dict[str, Any] = {}
        self.batches = Batches(
            settings,
            agent_id,
            start_body=lambda: dict(self._start),
            finish_body=lambda: dict(self._finish),
        )
        self.sender = Sender(
            settings,
            agent_id,
            next_batch=self.batches.cut,
            post=post,
            tick=lambda: self.tick(),
            on_command=on_command,
            clock=clock,
        )
        self.samples, self.steps, self.facts = (
            self.batches.samples,
            self.batches.steps,
            self.batches.facts,
        )
        self.outbox, self.replayer = self.sender.outbox, self.sender.replayer

    @property
    def rejected(self) -> int:
        return self.sender.rejected

    def start(self, body: dict[str, Any]) -> None:
        self._start = body
        self.sender.start()

    def close(self, finish: dict[str, Any], deadline_s: float) -> None:
        self._finish = finish
        self.sender.close(deadline_s)

    def abandon(self) -> None:
        self.sender.abandon()

    def reset_after_fork(self) -> None:
        self.batches.reset_after_fork()
        self.sender.reset_after_fork()


class Producer:
    """A tick that produces numbered samples, so losses and doubles are visible."""

    def __init__(self) -> None:
        self.produced = 0

    def __call__(self, rig: Rig) -> None:
        for _ in range(5):
            rig.samples.add("process", "process.rss", time.time(), float(self.produced))
            self.produced += 1


def settings_for(server: FakeServer, tmp_path: Path, **overrides: object) -> Settings:
    options: dict[str, object] = dict(
        server=server.url,
        token=TOKEN,
        interval=0.02,
        flush_interval=0.05,
        spill_dir=str(tmp_path / "spill"),
        http_timeout=0.5,
        heartbeat_after=0.3,
        backoff_base=0.02,
    )
    options.update(overrides)
    return load_settings(env={}, **options)


def make_sender(
    server: FakeServer,
    tmp_path: Path,
    agent_id: str = "a" * 32,
    clock: Callable[[], float] = time.monotonic,
    post: transport.PostFn = transport.post,
    **overrides: object,
) -> tuple[Rig, Producer]:
    producer = Producer()
    rig = Rig(settings_for(server, tmp_path, **overrides), agent_id, clock=clock, post=post)
    rig.tick = lambda: producer(rig)
    return rig, producer


def start_body(sender: Rig) -> dict[str, object]:
    return {"run_id": sender.settings.run_id, "agent_id": sender.agent_id, "role": "worker"}


def finish_body(sender: Rig) -> dict[str, object]:
    return {
        "run_id": sender.settings.run_id,
        "agent_id": sender.agent_id,
        "exit_code": 0,
        "final": True,
    }


def stored_values(server: FakeServer) -> list[float]:
    return server.store.metric("process", "process.rss")


def run_for(sender: Rig, seconds: float) -> None:
    sender.start(start_body(sender))
    time.sleep(seconds)


def assert_exactly_once(server: FakeServer, producer: Producer) -> None:
    values = stored_values(server)
    assert len(values) == producer.produced
    assert sorted(values) == [float(i) for i in range(producer.produced)]


def test_a_healthy_server_gets_every_sample_once(server: FakeServer, tmp_path: Path) -> None:
    sender, producer = make_sender(server, tmp_path)
    run_for(sender, 0.4)
    sender.close(finish_body(sender), 3.0)
    assert_exactly_once(server, producer)
    assert sender.agent_id in server.store.finishes


def test_500s_are_retried_and_nothing_is_doubled(server: FakeServer, tmp_path: Path) -> None:
    server.fail_next = ["500"] * 6
    sender, producer = make_sender(server, tmp_path)
    run_for(sender, 0.5)
    sender.close(finish_body(sender), 10.0)
    assert server.store.statuses[500] == 6
    assert_exactly_once(server, producer)


def test_429_retry_after_is_honoured(server: FakeServer, tmp_path: Path) -> None:
    server.fail_next = ["429"]
    server.retry_after = 1
    sender, producer = make_sender(server, tmp_path)
    run_for(sender, 0.2)
    sender.close(finish_body(sender), 5.0)
    times = server.store.request_times
    refused = next(t for t, status in times if status == 429)
    after = [t for t, status in times if status == 200]
    assert after and min(after) - refused >= 0.95
    assert_exactly_once(server, producer)


def test_a_slow_server_that_stores_then_times_out_stores_each_batch_once(
    server: FakeServer, tmp_path: Path
) -> None:
    server.slow_s = 0.8  # longer than the client's 0.5 s timeout: the client retries
    sender, producer = make_sender(server, tmp_path)
    sender.start(start_body(sender))
    while not server.store.starts:
        time.sleep(0.01)
    server.fail_next = ["slow"] * 3
    time.sleep(0.3)
    sender.close(finish_body(sender), 10.0)
    assert server.store.duplicates >= 1
    assert_exactly_once(server, producer)


def test_while_down_batches_spill_to_disk_and_replay_in_order(
    server: FakeServer, tmp_path: Path
) -> None:
    server.down()
    sender, producer = make_sender(server, tmp_path, max_outbox_batches=2)
    run_for(sender, 0.6)
    assert sender.outbox.spilled >= 1
    server.up()
    deadline = time.monotonic() + 20
    while (len(sender.outbox) or sender.outbox.spilled) and time.monotonic() < deadline:
        time.sleep(0.05)
    sender.close(finish_body(sender), 5.0)
    seqs = [seq for _, seq in server.store.arrival]
    assert seqs == sorted(seqs) == list(range(len(seqs)))
    assert_exactly_once(server, producer)
    spill_files = [f for _, _, files in os.walk(tmp_path / "spill") for f in files]
    assert spill_files == []


def test_down_at_exit_keeps_everything_on_disk_for_upload(
    server: FakeServer, tmp_path: Path
) -> None:
    server.down()
    sender, producer = make_sender(server, tmp_path)
    run_for(sender, 0.3)
    sender.close(finish_body(sender), 0.3)
    assert server.store.batches == {}
    server.up()
    report = upload(
        str(tmp_path / "spill"), server=server.url, token=TOKEN, delete=True, sleep=lambda s: None
    )
    assert report.failed == []
    assert_exactly_once(server, producer)
    assert server.store.finishes[sender.agent_id]["final"] is True


def test_a_collector_stuck_at_exit_neither_delays_the_exit_nor_loses_the_finish(
    server: FakeServer, tmp_path: Path
) -> None:
    sender, producer = make_sender(server, tmp_path)
    stuck = threading.Event()

    def tick() -> None:
        if sender.sender.closing:  # the last tick, at close: it hangs (an NVML call, say)
            stuck.wait(30)
        producer(sender)

    sender.tick = tick
    sender.start(start_body(sender))
    while not server.store.starts:
        time.sleep(0.01)
    began = time.monotonic()
    sender.close(finish_body(sender), 1.0)
    took = time.monotonic() - began
    stuck.set()
    assert took < 1.6  # the deadline, not the collector
    kept = tmp_path / "spill" / sender.settings.run_id / sender.agent_id / "finish.json"
    assert json.loads(kept.read_text())["final"] is True  # queued by close() itself
    (said,) = [b["unsent"] for b in server.store.heartbeat_bodies if "unsent" in b]
    assert said == {"requests": 1, "exit_code": 0, "final": True}


def test_a_full_buffer_drops_new_samples_and_reports_the_count(
    server: FakeServer, tmp_path: Path
) -> None:
    sender, producer = make_sender(server, tmp_path, max_buffered_samples=7, flush_interval=10.0)
    sender.start(start_body(sender))
    time.sleep(0.3)
    sender.close(finish_body(sender), 3.0)
    stored = len(stored_values(server))
    last = server.store.batches[max(server.store.batches)]
    assert stored + last["dropped"] == producer.produced
    assert last["dropped"] > 0


def test_a_rejected_token_stops_sending(server: FakeServer, tmp_path: Path) -> None:
    sender, _ = make_sender(server, tmp_path, token="wrong")
    run_for(sender, 0.3)
    sender.close(finish_body(sender), 1.0)
    assert server.store.statuses[401] == 1
    assert server.store.batches == {}


def test_it_heartbeats_when_idle_and_acts_on_commands(server: FakeServer, tmp_path: Path) -> None:
    server.commands = [{"type": "capture_trace", "steps": 3}, {"type": "from_the_future"}]
    seen: list[dict[str, object]] = []
    settings = load_settings(
        env={},
        server=server.url,
        token=TOKEN,
        interval=0.05,
        flush_interval=0.05,
        heartbeat_after=0.2,
        spill_dir=str(tmp_path / "spill"),
    )
    sender = Rig(settings, "b" * 32, on_command=seen.append)
    sender.start({"run_id": settings.run_id, "agent_id": sender.agent_id})
    time.sleep(0.8)
    sender.close(finish_body(sender), 1.0)
    assert server.store.heartbeats >= 1
    assert {"type": "capture_trace", "steps": 3} in seen


def test_unreachable_server_is_a_transient_reply_not_an_exception() -> None:
    reply = transport.post("http://127.0.0.1:9", "/x", None, transport.encode({}), 0.5)
    assert reply.status == 0 and reply.transient


def test_it_packs_arrays_once_the_server_lists_the_feature(
    server: FakeServer, tmp_path: Path
) -> None:
    sender, producer = make_sender(server, tmp_path)
    sender.steps.add(7, time.time(), 0.5, 0.25)
    run_for(sender, 0.4)
    sender.close(finish_body(sender), 3.0)
    assert_exactly_once(server, producer)  # unpacked to the same values, each once
    assert server.store.packed_batches == len(server.store.batches) - unpacked_before_start(server)
    assert server.store.packed_batches > 0
    assert server.store.steps() == [7]


def unpacked_before_start(server: FakeServer) -> int:
    """Batches cut before start's reply came back go as plain arrays (at most the first)."""
    count = len(server.store.batches) - server.store.packed_batches
    assert count <= 1
    return count


def test_an_older_server_without_the_feature_gets_plain_arrays(
    server: FakeServer, tmp_path: Path
) -> None:
    server.features = []
    sender, producer = make_sender(server, tmp_path)
    run_for(sender, 0.4)
    sender.close(finish_body(sender), 3.0)
    assert_exactly_once(server, producer)
    assert server.store.batches and server.store.packed_batches == 0
