"""The step timer picks the best boundary the script exercises (pure, with a fake clock)."""

from __future__ import annotations

import pytest

from perfweb_agent.core.buffer import StepBuffer
from perfweb_agent.runtime.steps import CONFIRM_EVENTS, StepTimer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _timer() -> tuple[StepTimer, StepBuffer, Clock, list[tuple[float, float]]]:
    buffer, clock, sizes = StepBuffer(), Clock(), []
    timer = StepTimer(buffer, clock=clock, wall=clock, batch_sink=sizes.append)
    return timer, buffer, clock, sizes


def _durations(buffer: StepBuffer) -> list[float]:
    steps = buffer.drain(0)
    return [] if steps is None else steps["duration"]


def test_it_drops_the_backwards_of_a_loop_that_then_steps_an_optimizer() -> None:
    timer, buffer, clock, _ = _timer()
    optimizer = object()
    for _ in range(3):
        clock.now += 1.0
        timer.backward_done()
        timer.optimizer_stepped(optimizer)
    assert (timer.source, timer.index, len(buffer)) == ("optimizer", 3, 3)
    assert _durations(buffer) == [1.0, 1.0, 1.0]


def test_backwards_count_once_enough_of_them_came_without_an_optimizer() -> None:
    timer, buffer, clock, _ = _timer()
    for _ in range(CONFIRM_EVENTS["backward"] - 1):
        clock.now += 0.5
        timer.backward_done()
    assert (timer.source, len(buffer)) == (None, 0)  # still waiting for a better source
    clock.now += 0.5
    timer.backward_done()
    assert (timer.source, len(buffer)) == ("backward", CONFIRM_EVENTS["backward"])
    assert set(_durations(buffer)) == {0.5}


def test_a_candidate_still_waiting_at_exit_counts() -> None:
    timer, buffer, clock, _ = _timer()
    for _ in range(2):
        clock.now += 1.0
        timer.backward_done()
    timer.finish()
    assert (timer.source, timer.index, len(buffer)) == ("backward", 2, 2)


def test_a_module_call_is_timed_from_its_start_and_carries_its_batch_size() -> None:
    timer, buffer, clock, sizes = _timer()
    for size in (3, 5, 7, 9):
        clock.now += 10.0  # idle between requests
        started = clock.now
        timer.batch_size(size, from_module=True)
        clock.now += 0.25
        timer.module_called(started)
    assert timer.source == "module"
    assert _durations(buffer) == [0.25] * 4
    assert [v for _, v in sizes] == [3.0, 5.0, 7.0, 9.0]


def test_a_module_call_fed_by_a_dataloader_includes_the_wait_for_its_batch() -> None:
    timer, buffer, clock, _ = _timer()
    for _ in range(4):
        timer.fetch_started()
        fetch = clock.now
        clock.now += 0.5
        timer.data_wait(fetch, 0.5)
        timer.fetch_done(8)
        started = clock.now
        clock.now += 0.25
        timer.module_called(started)
    steps = buffer.drain(0)
    assert steps is not None and timer.source == "module"
    assert (steps["duration"], steps["data_wait"]) == ([0.75] * 4, [0.5] * 4)


def test_dataloader_batches_are_steps_only_when_nothing_better_fires() -> None:
    timer, buffer, clock, sizes = _timer()
    for _ in range(5):
        timer.fetch_started()
        timer.fetch_done(4)
        clock.now += 1.0
    timer.fetch_started()  # the StopIteration call ends the last batch's step
    assert (timer.source, len(buffer)) == ("dataloader", 5)
    assert [v for _, v in sizes] == [4.0] * 5


@pytest.mark.parametrize("first", ["backward", "module", "dataloader"])
def test_agent_step_overrides_every_automatic_source(first: str) -> None:
    timer, buffer, clock, _ = _timer()
    events = {
        "backward": timer.backward_done,
        "module": lambda: timer.module_called(clock.now),
        "dataloader": lambda: (timer.fetch_started(), timer.fetch_done(None)),
    }
    for _ in range(10):
        clock.now += 1.0
        events[first]()
        timer.manual_step()
        timer.optimizer_stepped(object())
    assert (timer.source, timer.index, len(buffer)) == ("manual", 10, 10)


def test_a_listener_that_removes_itself_never_hides_the_next_one_from_that_boundary() -> None:
    # The FLOPs count leaves the listeners once done (at the end of step 2); the profiler's
    # listener after it missed that boundary, so a window due at step 3 opened at step 4.
    timer, _, clock, _ = _timer()
    optimizer, seen = object(), []

    def once(index: int) -> None:
        if index == 3:
            timer.listeners.remove(once)

    timer.listeners += [once, seen.append]
    for _ in range(5):
        clock.now += 1.0
        timer.optimizer_stepped(optimizer)
    assert seen == [1, 2, 3, 4, 5] and timer.listeners == [seen.append]


def test_calls_inside_a_frameworks_evaluation_after_training_are_no_requests_served() -> None:
    timer, buffer, clock, _ = _timer()
    optimizer = object()
    for _ in range(2):
        clock.now += 1.0
        timer.optimizer_stepped(optimizer)
    timer.evaluation_started()  # the trainer's last evaluation, after its last step
    for _ in range(3):
        started = clock.now
        clock.now += 0.1
        timer.module_called(started)
    timer.evaluation_ended()
    for _ in range(2):  # then the script serves
        started = clock.now
        clock.now += 0.2
        timer.module_called(started)
    assert (timer.source, len(buffer)) == ("optimizer", 2)
    assert timer.after_training.count == 2
    assert [round(seconds, 6) for _, seconds, _ in timer.after_training.calls] == [0.2, 0.2]
