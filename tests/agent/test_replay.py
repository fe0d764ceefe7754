"""What an agent could not send before it ended is sent by the next agent on the host that
talks to the same server with the same token: no `perf-agent upload` after an outage."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from perfweb_agent.delivery import claims, transport
from tests.agent.fakeserver import TOKEN, FakeServer
from tests.agent.test_sender import (
    Producer,
    Rig,
    finish_body,
    run_for,
    start_body,
)
from tests.agent.test_sender import (
    make_sender as make_any_sender,
)


class ShiftedClock:
    """The sender's monotonic clock, shifted by `shift` seconds (which a test may change)."""

    def __init__(self, shift: float) -> None:
        self.shift = shift

    def __call__(self) -> float:
        return time.monotonic() + self.shift


def make_sender(server: FakeServer, tmp_path: Path, **overrides: object) -> tuple[Rig, Producer]:
    """A sender with an agent id of its own (the earlier and the later agent differ)."""
    return make_any_sender(server, tmp_path, agent_id=uuid.uuid4().hex, **overrides)


def assert_sent_once(server: FakeServer, sender: Rig, producer: Producer) -> None:
    """Every sample this agent produced is stored once."""
    values = [
        v
        for (run, _, _), body in sorted(server.store.batches.items())
        if run == sender.settings.run_id
        for m in body["metrics"]
        for v in m["v"]
    ]
    assert sorted(values) == [float(i) for i in range(producer.produced)]


def files_under(folder: Path) -> list[str]:
    return sorted(str(Path(d, f).relative_to(folder)) for d, _, fs in os.walk(folder) for f in fs)


def leave_behind(server: FakeServer, tmp_path: Path, **overrides: object) -> tuple[Rig, Producer]:
    """An agent that ran while the server was down and ended before it came back."""
    server.down()
    sender, producer = make_sender(server, tmp_path, **overrides)
    run_for(sender, 0.3)
    sender.close(finish_body(sender), 0.3)
    server.up()
    assert server.store.batches == {} and sender.outbox.spilled >= 2
    return sender, producer


def test_the_next_agent_on_the_host_sends_what_an_earlier_one_left(
    server: FakeServer, tmp_path: Path
) -> None:
    earlier, produced = leave_behind(server, tmp_path)
    later, _ = make_sender(server, tmp_path)
    run_for(later, 0.5)
    later.close(finish_body(later), 5.0)
    assert_sent_once(server, earlier, produced)  # the earlier agent's samples, all, once
    assert server.store.finishes[earlier.agent_id]["final"] is True
    assert earlier.agent_id in server.store.starts
    assert later.replayer is not None and later.replayer.sent >= 3
    assert files_under(tmp_path / "spill") == []  # nothing left, not even a lock


def test_leftovers_are_sent_during_the_run_as_soon_as_the_server_answers(
    server: FakeServer, tmp_path: Path
) -> None:
    earlier, _ = leave_behind(server, tmp_path)
    server.down()
    later, _ = make_sender(server, tmp_path)
    run_for(later, 0.3)
    assert earlier.agent_id not in server.store.finishes
    server.up()
    deadline = time.monotonic() + 15
    while earlier.agent_id not in server.store.finishes:
        assert time.monotonic() < deadline, "the leftovers were not sent while running"
        time.sleep(0.05)
    assert later.agent_id not in server.store.finishes  # the later agent is still running
    later.close(finish_body(later), 5.0)


def test_it_leaves_alone_what_was_meant_for_another_server_or_token(
    server: FakeServer, tmp_path: Path
) -> None:
    other_token, _ = leave_behind(server, tmp_path, token="another-project")
    later, _ = make_sender(server, tmp_path)
    run_for(later, 0.5)
    later.close(finish_body(later), 3.0)
    assert other_token.agent_id not in server.store.starts
    assert other_token.agent_id not in server.store.finishes
    folder = Path(other_token.outbox.spill_folder or "")
    assert (folder / "finish.json").exists() and (folder / "start.json").exists()


def test_it_leaves_alone_the_folder_of_an_agent_that_is_still_running(
    server: FakeServer, tmp_path: Path
) -> None:
    unreachable = lambda *args: transport.Reply(0, error="refused")  # noqa: E731
    # this one cannot reach the server: it spills, and lives on
    running, _ = make_sender(server, tmp_path, post=unreachable, max_outbox_batches=1)
    run_for(running, 0.5)
    assert running.outbox.spilled >= 2
    later, _ = make_sender(server, tmp_path)
    run_for(later, 0.5)
    later.close(finish_body(later), 3.0)
    assert running.agent_id not in server.store.starts
    assert running.outbox.spilled >= 2 and running.outbox.dropped_samples == 0
    running.abandon()


def test_a_leftover_the_server_refuses_for_good_is_set_aside_and_counted(
    server: FakeServer, tmp_path: Path
) -> None:
    earlier, _ = leave_behind(server, tmp_path)
    server.refuse = lambda path, body: (
        "seq is taken" if path.endswith("/batch") and body["seq"] == 0 else None
    )
    later, _ = make_sender(server, tmp_path)
    run_for(later, 0.5)
    later.close(finish_body(later), 5.0)
    assert later.replayer is not None and later.replayer.rejected == 1
    assert server.store.finishes[earlier.agent_id]["final"] is True  # the rest went on
    folder = Path(earlier.outbox.spill_folder or "")
    assert sorted(os.listdir(folder)) == sorted(
        ["batch-00000000.json.gz.rejected", *claims.OWN_FILES]
    )


def test_an_agent_at_exit_sends_leftovers_within_its_deadline(
    server: FakeServer, tmp_path: Path
) -> None:
    earlier, produced = leave_behind(server, tmp_path)
    held = claims.FolderLock.take(str(tmp_path / "spill" / earlier.settings.run_id))
    assert held is not None  # as if its launcher still lived: the later agent's look finds none
    clock = ShiftedClock(0.0)
    later, _ = make_sender(server, tmp_path, clock=clock, interval=10.0, flush_interval=10.0)
    later.start(start_body(later))
    while later.agent_id not in server.store.starts:
        time.sleep(0.02)
    time.sleep(0.2)  # its first look at the spill directory, after the start's answer
    assert earlier.agent_id not in server.store.starts
    held.release()
    clock.shift = 3600.0  # its next look is due by the time it exits
    began = time.monotonic()
    later.close(finish_body(later), 5.0)
    assert time.monotonic() - began < 5.5
    assert_sent_once(server, earlier, produced)
    assert server.store.finishes[earlier.agent_id]["final"] is True
    assert TOKEN


def test_a_forked_child_never_keeps_its_parents_spill_folder_locked(
    server: FakeServer, tmp_path: Path
) -> None:
    server.down()
    parent, produced = make_sender(server, tmp_path, max_outbox_batches=1)
    run_for(parent, 0.3)
    assert parent.outbox.spilled >= 1  # its folder is locked now
    child = os.fork()
    if child == 0:  # a DataLoader worker: what the agent's at-fork handler does, then work
        parent.reset_after_fork()
        time.sleep(30)
        os._exit(0)
    try:
        parent.close(finish_body(parent), 0.3)
        server.up()
        later, _ = make_sender(server, tmp_path)
        run_for(later, 0.5)
        later.close(finish_body(later), 5.0)
        assert os.waitpid(child, os.WNOHANG) == (0, 0)  # the child still lives
        assert_sent_once(server, parent, produced)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
