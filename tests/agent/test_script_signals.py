"""`perfweb_agent.log(**scalars)` and `perfweb_agent.phase(name)` in the script: what they record,
what they
drop (with a warning, never an exception), and the bounds
(agent/perfweb_agent/runtime/scalars.py)."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import perfweb_agent
from perfweb_agent.core.buffer import FactBuffer, SampleBuffer
from perfweb_agent.core.logger import _said as said_once
from perfweb_agent.core.logger import log as agent_log
from perfweb_agent.runtime.scalars import FACT_DROPPED, ScriptSignals
from perfweb_contract import protocol
from tests.agent.conftest import ROOT, write_script
from tests.agent.fakeserver import TOKEN, FakeServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def signals() -> tuple[ScriptSignals, SampleBuffer, FactBuffer, Clock]:
    samples, facts, clock = SampleBuffer(), FactBuffer(), Clock()
    return ScriptSignals(samples, facts, device="rank:0", clock=clock), samples, facts, clock


def series(samples: SampleBuffer) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    metrics, _ = samples.drain()
    return {(m["device"], m["name"]): (m["t"], m["v"]) for m in metrics}


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    said_once.clear()  # each warning is said once per process: once per test here
    agent_log.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger="perf_agent")
    yield caplog
    agent_log.removeHandler(caplog.handler)


def test_it_records_each_scalar_as_a_series_of_the_rank_at_the_same_time(signals: Any) -> None:
    recorder, samples, _, clock = signals
    recorder.log({"loss": 2.5, "tokens": 4096})
    clock.now = 1001.0
    recorder.log({"loss": torch.tensor(1.5), "lr": torch.tensor([3e-4], dtype=torch.float64)})
    got = series(samples)
    assert got[("rank:0", "scalar.loss")] == ([1000.0, 1001.0], [2.5, 1.5])
    assert got[("rank:0", "scalar.tokens")] == ([1000.0], [4096.0])
    assert got[("rank:0", "scalar.lr")] == ([1001.0], [3e-4])


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, "1.5", True, None, [1.0], torch.tensor([1.0, 2.0]), object()]
)
def test_it_drops_a_value_that_is_not_one_finite_number_and_says_so(
    signals: Any, warnings: pytest.LogCaptureFixture, value: Any
) -> None:
    recorder, samples, facts, _ = signals
    recorder.log({"loss": value, "tokens": 10})
    assert series(samples) == {("rank:0", "scalar.tokens"): ([1000.0], [10.0])}
    assert facts.snapshot()[FACT_DROPPED] == 1
    assert "not a finite number; dropped" in warnings.text


@pytest.mark.parametrize("name", ["Loss", "tokens/s", "9lives", "_x", "", "x" * 57])
def test_it_drops_a_name_outside_the_pattern_and_suggests_one(
    signals: Any, warnings: pytest.LogCaptureFixture, name: str
) -> None:
    recorder, samples, facts, _ = signals
    recorder.log({name: 1.0})
    assert series(samples) == {}
    assert facts.snapshot()[FACT_DROPPED] == 1
    assert "is not a scalar name" in warnings.text


def test_it_takes_the_longest_name_whose_series_fits_the_protocol(signals: Any) -> None:
    recorder, samples, _, _ = signals
    recorder.log({"x" * 56: 1.0})
    ((device, name),) = series(samples)
    assert protocol.METRIC_NAME_RE.match(name) and len(name) == 63


def test_it_takes_at_most_64_names_and_keeps_logging_those(
    signals: Any, warnings: pytest.LogCaptureFixture
) -> None:
    recorder, samples, facts, _ = signals
    recorder.log({f"m{i}": float(i) for i in range(protocol.MAX_SCALAR_NAMES + 3)})
    recorder.log({"m0": 5.0, "another": 1.0})
    got = series(samples)
    assert len(got) == protocol.MAX_SCALAR_NAMES
    assert got[("rank:0", "scalar.m0")][1] == [0.0, 5.0]
    assert facts.snapshot()[FACT_DROPPED] == 4
    assert "more than 64 scalar names" in warnings.text


def test_a_phase_is_recorded_at_each_change_with_its_time_and_entries(signals: Any) -> None:
    recorder, samples, facts, clock = signals
    recorder.phase("train")
    clock.now = 1010.0
    recorder.phase("eval")
    recorder.phase("eval")  # the same phase again: nothing
    clock.now = 1012.5
    recorder.phase("train")
    clock.now = 1020.0
    recorder.phase("none")
    assert series(samples)[("rank:0", protocol.RUN_PHASE)] == (
        [1000.0, 1010.0, 1012.5, 1020.0],
        [1.0, 2.0, 1.0, 0.0],
    )
    known = facts.snapshot()
    assert (known["phases.train_s"], known["phases.eval_s"]) == (17.5, 2.5)
    assert (known["phases.train_count"], known["phases.eval_count"]) == (2, 1)


def test_an_unknown_phase_is_ignored_with_a_warning(
    signals: Any, warnings: pytest.LogCaptureFixture
) -> None:
    recorder, samples, _, _ = signals
    recorder.phase("warmup")
    assert series(samples) == {} and recorder.current_phase == "none"
    assert "not one of none, train, eval, test, predict" in warnings.text


def test_without_an_agent_log_and_phase_do_nothing() -> None:
    assert perfweb_agent.current() is None
    perfweb_agent.log(loss=1.0, **{"Bad Name": "x"})
    perfweb_agent.phase("eval")


IN_SCRIPT = """
import math, sys, perfweb_agent
a = perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=0.1)
perfweb_agent.phase("train")
for i in range(5):
    perfweb_agent.log(loss=1.0 / (i + 1), tokens=512 * (i + 1))
    perfweb_agent.step()
perfweb_agent.log(**{"Bad Name": 1.0}, nan=math.nan, ok=2.0)
perfweb_agent.phase("eval")
perfweb_agent.phase("none")
print("done")
"""


def test_logged_scalars_reach_the_server_and_bad_ones_never_break_the_script(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, IN_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), server.url, TOKEN],
        env=agent_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr
    assert server.store.metric("rank:0", "scalar.loss") == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    assert server.store.metric("rank:0", "scalar.tokens") == [512.0 * i for i in range(1, 6)]
    assert server.store.metric("rank:0", "scalar.ok") == [2.0]
    assert server.store.metric("rank:0", protocol.RUN_PHASE) == [1.0, 2.0, 0.0]
    assert server.store.steps() == [0, 1, 2, 3, 4]  # logging marks no step
    assert server.store.facts()[FACT_DROPPED] == 2
    assert "'Bad Name' is not a scalar name" in result.stderr
    assert server.store.statuses[400] == 0


FORKED_LOGGER = """
import os, sys, perfweb_agent
a = perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=0.1)
perfweb_agent.log(loss=1.0)
a.signals._lock.acquire()  # held by the parent at fork: the child must not wait on it
pid = os.fork()
if pid == 0:
    perfweb_agent.log(loss=99.0, **{"Bad Name": 1.0})
    perfweb_agent.phase("eval")
    os._exit(0)
a.signals._lock.release()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_logs_nothing_and_does_not_deadlock(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, FORKED_LOGGER)
    result = subprocess.run(
        [sys.executable, str(script), server.url, TOKEN],
        env=agent_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (result.returncode, result.stdout) == (0, "child 0\n"), result.stderr
    assert server.store.metric("rank:0", "scalar.loss") == [1.0]
    assert server.store.metric("rank:0", protocol.RUN_PHASE) == []


def test_agent_log_is_the_in_script_function_and_the_logger_a_module_of_another_name() -> None:
    import importlib

    # importing it leaves perfweb_agent.log alone
    module = importlib.import_module("perfweb_agent.core.logger")
    assert module.log.name == "perf_agent"
    log = perfweb_agent.log
    assert log.__module__ == "perfweb_agent" and log.__name__ == "log" and callable(log)


def test_scalars_beyond_the_sample_buffers_bound_are_dropped_and_counted() -> None:
    samples = SampleBuffer(max_samples=3)
    recorder = ScriptSignals(samples, FactBuffer(), device="rank:0", clock=Clock())
    recorder.log({"loss": 1.0, "tokens": 2.0})
    recorder.log({"loss": 3.0, "tokens": 4.0})
    assert (len(samples), samples.dropped, samples.accepted) == (3, 1, 3)
    assert series(samples) == {
        ("rank:0", "scalar.loss"): ([1000.0, 1000.0], [1.0, 3.0]),
        ("rank:0", "scalar.tokens"): ([1000.0], [2.0]),
    }
