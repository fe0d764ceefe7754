"""A server slower than the agent's timeout or its flush interval: sampling goes on, the
data still arrives live, each sample once."""

from __future__ import annotations

import time
from pathlib import Path

from perfweb_agent.delivery.sender import Sender
from perfweb_agent.runtime.config import ENV_HTTP_TIMEOUT, load_settings, settings_env
from tests.agent.fakeserver import FakeServer
from tests.agent.test_sender import (
    Producer,
    assert_exactly_once,
    finish_body,
    make_sender,
    start_body,
)


def timed_ticks(sender: Sender, producer: Producer) -> list[float]:
    """Makes the sender's tick record when it ran; returns that list."""
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(time.monotonic())
        producer(sender)

    sender._tick = tick
    return ticks


def test_it_keeps_sampling_on_time_while_a_request_hangs(
    server: FakeServer, tmp_path: Path
) -> None:
    sender, producer = make_sender(server, tmp_path, http_timeout=5.0)
    ticks = timed_ticks(sender, producer)
    sender.start(start_body(sender))
    while not server.store.starts:
        time.sleep(0.01)
    server.slow_s = 2.0
    server.fail_next = ["slow"]  # the next request takes 2 s to answer
    time.sleep(2.5)
    sender.close(finish_body(sender), 10.0)
    ((held_from, held_to),) = server.store.slow_windows  # the hang really happened
    during = [t for t in ticks if held_from <= t <= held_to]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
    assert len(during) >= 20  # every 0.02 s: ~100 ticks while the request hung
    assert max(gaps) < 1.0  # one thread sampling and sending had a 2 s gap here
    assert_exactly_once(server, producer)


def test_a_server_slower_than_the_timeout_still_gets_every_sample_once(
    server: FakeServer, tmp_path: Path
) -> None:
    server.mode, server.slow_s = "slow", 0.6  # every answer after 0.6 s, stored before
    sender, producer = make_sender(server, tmp_path, http_timeout=0.25)
    run_until_stored(sender, server, samples=20, deadline_s=20)
    assert sender._timeout_s > 0.6  # it learnt to wait longer than the setting
    sender.close(finish_body(sender), 10.0)
    assert_exactly_once(server, producer)
    assert sender.agent_id in server.store.finishes


def test_it_sends_fewer_larger_batches_to_a_server_slower_than_the_flush_interval(
    server: FakeServer, tmp_path: Path
) -> None:
    server.mode, server.slow_s = "slow", 0.5  # flush every 0.05 s, an answer every 0.5 s
    sender, producer = make_sender(server, tmp_path, http_timeout=5.0)
    sender.start(start_body(sender))
    time.sleep(3.0)
    live = len(server.store.batches)
    sender.close(finish_body(sender), 10.0)
    assert live >= 2  # the data arrived while the run went on
    assert len(server.store.batches) <= 12  # not one per 0.05 s flush (~60), queued behind
    assert sender.outbox.spilled == 0
    assert_exactly_once(server, producer)


def test_the_http_timeout_comes_from_the_environment_and_reaches_the_children() -> None:
    settings = load_settings(env={ENV_HTTP_TIMEOUT: "42.5"})
    assert settings.http_timeout == 42.5
    assert settings_env(settings)[ENV_HTTP_TIMEOUT] == "42.5"
    assert load_settings(env={ENV_HTTP_TIMEOUT: "soon"}).http_timeout == 15.0
    assert load_settings(env={}, http_timeout=3.0).http_timeout == 3.0


def run_until_stored(
    sender: Sender, server: FakeServer, *, samples: int, deadline_s: float
) -> None:
    sender.start(start_body(sender))
    deadline = time.monotonic() + deadline_s
    while server.store.samples() < samples:
        assert time.monotonic() < deadline, f"only {server.store.samples()} samples stored"
        time.sleep(0.05)
