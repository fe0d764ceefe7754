"""A server slower than the agent's timeout or its flush interval: sampling goes on, the
data still arrives live, each sample once; and one slower than the exit deadline: the exit
is not delayed, and what it had not taken (the finish above all) is kept on the host, said
so, and sent later."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from perfweb_agent.core.config import ENV_HTTP_TIMEOUT, load_settings, settings_env
from perfweb_agent.delivery.upload import upload
from tests.agent.conftest import attach, online, write_script
from tests.agent.fakeserver import TOKEN, FakeServer
from tests.agent.test_sender import (
    Producer,
    Rig,
    assert_exactly_once,
    finish_body,
    make_sender,
    start_body,
)


def timed_ticks(sender: Rig, producer: Producer) -> list[float]:
    """Makes the sender's tick record when it ran; returns that list."""
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(time.monotonic())
        producer(sender)

    sender.tick = tick
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
    assert sender.sender.link.backoff.timeout_s > 0.6  # it learnt to wait longer than the setting
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


def run_until_stored(sender: Rig, server: FakeServer, *, samples: int, deadline_s: float) -> None:
    sender.start(start_body(sender))
    deadline = time.monotonic() + deadline_s
    while server.store.samples() < samples:
        assert time.monotonic() < deadline, f"only {server.store.samples()} samples stored"
        time.sleep(0.05)


def unsent_said(server: FakeServer) -> dict[str, dict[str, object]]:
    """What each agent said at its exit it could not hand over (heartbeat `unsent`)."""
    return {b["agent_id"]: b["unsent"] for b in server.store.heartbeat_bodies if "unsent" in b}


def test_a_request_in_flight_at_the_exit_deadline_neither_delays_the_exit_nor_loses_the_end(
    server: FakeServer, tmp_path: Path
) -> None:
    sender, producer = make_sender(server, tmp_path, http_timeout=15.0)
    sender.start(start_body(sender))
    while not server.store.starts:
        time.sleep(0.01)
    server.hold = {"/batch": 10.0}  # 10 s, then a gateway's 504: never stored
    while not sender.sender.link.in_flight:  # a batch is on its way, with the whole 15 s timeout
        time.sleep(0.01)
    began = time.monotonic()
    sender.close(finish_body(sender), 2.0)
    took = time.monotonic() - began
    assert took < 2.6  # the deadline, not the request's 10 s (was: 3 s, and nothing kept)
    folder = tmp_path / "spill" / sender.settings.run_id / sender.agent_id
    kept = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    assert kept[-1] == "finish.json" and kept[0].startswith("batch-")  # the held one too
    assert unsent_said(server) == {
        sender.agent_id: {"requests": len(kept), "exit_code": 0, "final": True}
    }
    assert sender.agent_id not in server.store.finishes
    server.hold = {}
    report = upload(str(tmp_path / "spill"), server=server.url, token=TOKEN)  # or the next agent
    assert report.failed == [] and report.sent == len(kept)
    assert server.store.finishes[sender.agent_id]["final"] is True
    assert_exactly_once(server, producer)


EXITS_7 = """
import time
time.sleep(0.5)
print("done")
raise SystemExit(7)
"""


def test_a_run_whose_finishes_a_slow_server_never_took_ends_with_its_code_from_the_next_run(
    server: FakeServer, tmp_path: Path, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, EXITS_7)
    server.hold = {"/finish": 10.0}  # the launcher's and the script's finish: 504 after 10 s
    # 2.5 s: the whole END_RESERVE_MAX_S (0.5 s, as at the default 5 s) is left to spill and
    # say so; at 0.6 s a fifth, 0.12 s, which a loaded host can spend before the heartbeat.
    env = {**agent_env, "PERF_AGENT_EXIT_DEADLINE": "2.5", "PERF_AGENT_RUN_ID": "slowend" * 2}
    first = attach([*online(server), "--", sys.executable, str(script)], env)
    assert (first.returncode, first.stdout) == (7, "done\n"), first.stderr
    assert server.store.finishes == {}
    roles = {agent: body["role"] for agent, body in server.store.starts.items()}
    said = unsent_said(server)
    assert {roles[agent]: unsent["final"] for agent, unsent in said.items()} == {
        "launcher": True,
        "worker": False,
    }
    (launcher,) = [agent for agent, role in roles.items() if role == "launcher"]
    assert said[launcher] == {"requests": 1, "exit_code": 7, "final": True}
    kept = sorted((tmp_path / "spill").rglob("finish.json"))
    assert len(kept) == 2 and json.loads(kept[0].read_text())["run_id"] == "slowend" * 2
    server.hold = {}
    later = write_script(tmp_path, "print('next')\n", name="next.py")
    second = attach(
        [*online(server), "--", sys.executable, str(later)],
        {**agent_env, "PERF_AGENT_RUN_ID": "nextrun" * 2},
    )
    assert second.returncode == 0, second.stderr
    ended = {roles.get(a): f for a, f in server.store.finishes.items() if a in roles}
    assert (ended["launcher"]["exit_code"], ended["launcher"]["final"]) == (7, True)
    worker = next(agent for agent, role in roles.items() if role == "worker")
    assert server.store.samples(worker) == ended["worker"]["produced"]["samples"]
    assert list((tmp_path / "spill").rglob("*.json*")) == []
