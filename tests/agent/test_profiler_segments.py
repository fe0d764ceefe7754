"""A profiler window recorded in segments, so that no stop of Kineto holds a step long."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.config import Settings
from perfweb_agent.delivery.traces import Shipped
from perfweb_agent.runtime.kineto import SEGMENT_CLOSE_BUDGET_S, segment_length
from perfweb_agent.runtime.profiler import WINDOW_RSS_BUDGET_BYTES, ProfilerWindows


class _Augmented(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Many small tensor ops per sample, in the main process: an input-bound loop."""

    def __len__(self) -> int:
        return 10**6

    def __getitem__(self, index: int) -> torch.Tensor:
        x = torch.zeros(64)
        for k in range(20):
            x = x + k
        return x


def _windows(
    shipped: dict[str, bytes] | None = None, rss: Any = None, warmup: int = 10**9
) -> tuple[ProfilerWindows, FactBuffer]:
    """ProfilerWindows on a stand-in agent; the traces it ships go into `shipped`."""
    facts = FactBuffer()
    agent = SimpleNamespace(
        # no operator shapes: with them this loop's ~3,300 events a step outgrow the window's
        # RSS budget after 3 steps (the cut is tested on its own); these tests are of segments
        settings=Settings(profile_steps=5, profile_warmup_steps=warmup, profile_shapes=False),
        timer=SimpleNamespace(listeners=[], source="backward"),
        facts=facts,
        rank=0,
    )
    into = {} if shipped is None else shipped

    def ship(name: str, data: bytes) -> Shipped:
        into[name] = data
        return Shipped("offline")

    kwargs = {} if rss is None else {"rss": rss}
    windows = ProfilerWindows(agent, ship=ship, **kwargs)
    return windows, facts


def _run(windows: ProfilerWindows, steps: int, *, request_at: int, length: int) -> None:
    loader = iter(torch.utils.data.DataLoader(_Augmented(), batch_size=32))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU()).eval()
    with torch.inference_mode():
        for step in range(steps):
            if step == request_at:
                windows.request(length)
            model(next(loader)).argmax()
            windows.on_step(step)


@pytest.fixture
def shipped_traces() -> dict[str, bytes]:
    """The traces a test's windows shipped, by name."""
    return {}


def test_the_next_segment_is_as_long_as_the_close_budget_allows() -> None:
    # the last segment took 2 steps and twice the budget to stop: one step at a time now
    assert segment_length(2 * SEGMENT_CLOSE_BUDGET_S, 2, remaining=4) == 1
    # a tenth of the budget per step: all that is left of the window in one segment
    assert segment_length(0.1 * SEGMENT_CLOSE_BUDGET_S, 1, remaining=4) == 4
    assert segment_length(SEGMENT_CLOSE_BUDGET_S / 3, 1, remaining=10) == 3
    assert segment_length(0.0, 1, remaining=7) == 7
    assert segment_length(1.0, 1, remaining=0) == 1


def test_an_input_bound_window_is_recorded_in_segments_and_merged_into_one_trace(
    shipped_traces: dict[str, bytes],
) -> None:
    windows, facts = _windows(shipped_traces)
    _run(windows, 12, request_at=3, length=5)
    windows.poll()
    recorded = facts.snapshot()
    assert recorded["profiler.segments"] >= 2  # a step of ~3,300 events is too heavy for one
    assert recorded["profiler.last_trace"] == "rank0-step3-8 (offline)"
    trace = json.loads(gzip.decompress(shipped_traces["rank0-step3-8"]))
    assert trace["perfweb"]["segments"] == recorded["profiler.segments"]
    moved = trace["perfweb"]["moved_earlier_us"]
    assert moved[0] == 0 and all(b > a for a, b in zip(moved, moved[1:], strict=False))
    assert trace["baseTimeNanoseconds"] and trace["traceName"] == "rank0-step3-8"
    events = trace["traceEvents"]
    # every step of the window is there: its DataLoader fetch and its batch's ops
    fetches = sorted((e["ts"], e["dur"]) for e in events if "DataLoader" in str(e.get("name")))
    assert len(fetches) == 5
    # moved earlier by the profiler's own time between segments, and not further: the steps
    # follow one another without overlapping
    assert all(a[0] + a[1] <= b[0] for a, b in zip(fetches, fetches[1:], strict=False))
    adds = sum(1 for e in events if e.get("name") == "aten::add")
    assert adds == 5 * 32 * 20
    metadata = [json.dumps(e, sort_keys=True) for e in events if e.get("ph") == "M"]
    assert len(metadata) == len(set(metadata))
    assert [e["name"] for e in events if e.get("ph") == "i"] == [
        "Iteration Start: PyTorch Profiler",
        "Record Window End",
    ]


def test_a_window_ends_early_once_the_process_grew_past_the_budget(
    shipped_traces: dict[str, bytes],
) -> None:
    sizes = iter([100 * 2**20, 100 * 2**20 + WINDOW_RSS_BUDGET_BYTES + 1])
    windows, facts = _windows(shipped_traces, rss=lambda: next(sizes, 500 * 2**20))
    _run(windows, 10, request_at=2, length=5)
    windows.poll()
    recorded = facts.snapshot()
    assert recorded["profiler.window_cut"].startswith("after 1 of 5 steps")
    trace = json.loads(gzip.decompress(shipped_traces["rank0-step2-3"]))
    fetches = [e for e in trace["traceEvents"] if "DataLoader" in str(e.get("name"))]
    assert len(fetches) == 1


def test_a_light_loop_needs_few_segments(shipped_traces: dict[str, bytes]) -> None:
    windows, facts = _windows(shipped_traces)
    model = torch.nn.Linear(8, 8)
    for step in range(10):
        if step == 1:
            windows.request(5)
        model(torch.randn(4, 8)).sum().backward()
        windows.on_step(step)
    windows.poll()
    # a one-step probe, then the rest at once: a few ops per step cost far less than budget
    assert facts.snapshot()["profiler.segments"] == 2
    trace = json.loads(gzip.decompress(shipped_traces["rank0-step1-6"]))
    assert sum(1 for e in trace["traceEvents"] if e.get("name") == "aten::addmm") == 5


def test_the_trace_file_of_a_window_that_could_not_be_merged_is_not_left_behind(
    shipped_traces: dict[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    windows, facts = _windows(shipped_traces)
    _run(windows, 4, request_at=1, length=2)
    with windows._lock:
        ready = windows._ready[0]
    ready.segments[0][0].export_chrome_trace = lambda path: Path(path).write_text("[1, 2")
    windows.poll()
    assert shipped_traces == {} and list(tmp_path.iterdir()) == []
    assert windows._unshipped == 0  # the next window may open


def test_a_boundary_inside_a_scope_restarts_only_once_the_scope_closed(
    shipped_traces: dict[str, bytes],
) -> None:
    # optimizer post-hooks run inside Optimizer.step's record_function scope: a segment
    # started there would get that scope's end written into the stopped one's freed records
    from torch.optim.optimizer import register_optimizer_step_post_hook

    windows, facts = _windows(shipped_traces)
    model = torch.nn.Linear(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = iter(torch.utils.data.DataLoader(_Augmented(), batch_size=32))
    seen: list[bool] = []
    step = [0]

    def boundary(*_: Any) -> None:
        windows.on_step(step[0])
        seen.append(windows._profile is None)  # between segments, inside the scope
        step[0] += 1

    handle = register_optimizer_step_post_hook(boundary)
    try:
        for index in range(9):
            if index == 1:
                windows.request(5)
            opt.zero_grad()
            model(next(loader)).sum().backward()
            opt.step()
            if windows._window is not None:
                assert windows._profile is not None  # the scope closed: the next one runs
    finally:
        handle.remove()
    windows.poll()
    segments = facts.snapshot()["profiler.segments"]
    assert segments >= 2 and all(seen[2 : 1 + segments])  # each restart waited
    trace = json.loads(gzip.decompress(shipped_traces["rank0-step1-6"]))
    steps = [e for e in trace["traceEvents"] if e.get("name") == "Optimizer.step#SGD.step"]
    assert len(steps) == 5


def test_a_scope_that_began_inside_the_window_and_spans_steps_ends_it(
    shipped_traces: dict[str, bytes],
) -> None:
    windows, facts = _windows(shipped_traces)
    loader = iter(torch.utils.data.DataLoader(_Augmented(), batch_size=32))
    for step in range(8):
        if step == 1:
            windows.request(5)
        if step == 2:
            scope = torch.autograd.profiler.record_function("epoch")
            scope.__enter__()
        next(loader)
        windows.on_step(step)
    scope.__exit__(None, None, None)
    windows.poll()
    assert "stayed open across a step" in facts.snapshot()["profiler.window_cut"]
    assert len(shipped_traces) == 1
    assert torch.autograd.profiler.record_function.__enter__.__module__ == "torch.autograd.profiler"


def test_no_window_opens_once_the_agent_closed() -> None:
    # issue 27: steps a source confirms only at exit opened a window after close(); still
    # recording when the interpreter was torn down, it crashed the script (SIGSEGV)
    windows, facts = _windows(warmup=2)
    windows.close()
    windows.on_step(30)
    assert windows._window is None and not torch.autograd.profiler._is_profiler_enabled
    assert facts.snapshot()["profiler.skipped"].startswith(
        "this run's 30 steps were only confirmed as steps when it ended (backward boundaries"
    )


def test_a_boundary_inside_a_backward_pass_neither_starts_nor_stops_the_profiler(
    shipped_traces: dict[str, bytes],
) -> None:
    # the autograd engine puts the thread's profiler state back when a node returns: a
    # segment started or stopped in a gradient hook is undone behind torch's back
    windows, facts = _windows(shipped_traces)
    model = torch.nn.Linear(8, 1)
    step = [0]
    states: list[tuple[bool, Any]] = []

    def boundary(_: Any) -> None:  # an optimizer stepped in the hook, say
        windows.on_step(step[0])
        states.append((windows._window is not None, windows._profile))
        step[0] += 1

    model.weight.register_post_accumulate_grad_hook(boundary)
    windows.request(3)
    model(torch.randn(4, 8)).sum().backward()
    assert states == [(False, None)]  # put off: not opened inside the backward
    assert "put off" in facts.snapshot()["profiler.skipped"]
    windows.on_step(step[0])  # a boundary outside: it opens here
    profile = windows._profile
    assert profile is not None
    for _ in range(4):
        model(torch.randn(4, 8)).sum().backward()
    assert {p for _, p in states[1:]} == {profile}  # never stopped nor restarted in there
    assert torch.autograd.profiler._is_profiler_enabled
    windows.on_step(step[0])  # outside again: the window ends
    assert windows._window is None and not torch.autograd.profiler._is_profiler_enabled
    windows.poll()
    assert "outside backward passes" in facts.snapshot()["profiler.one_piece"]
    (trace,) = shipped_traces.values()
    events = json.loads(gzip.decompress(trace))["traceEvents"]
    assert sum(1 for e in events if e.get("name") == "aten::addmm") == 4


WORKERS_DURING_A_WINDOW = """
import sys, torch, perfweb_agent
from torch.utils.data import DataLoader, TensorDataset
perfweb_agent.attach(offline=sys.argv[1], interval=0.05, flush_interval=0.1, profile=True,
             profile_warmup_steps=2, profile_steps=5, profile_every_s=3600)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for epoch in range(4):  # each epoch forks two workers: some while the window records
    with torch.autograd.profiler.record_function("epoch"):
        for x, y in DataLoader(data, batch_size=16, num_workers=2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            steps += 1
print(steps)
"""


def test_dataloader_workers_forked_while_a_window_records_do_not_touch_it(
    tmp_path: Path, agent_env: dict[str, str]
) -> None:
    import subprocess
    import sys

    from tests.agent.conftest import ROOT, write_script

    script = write_script(tmp_path, WORKERS_DURING_A_WINDOW)
    out = tmp_path / "offline"
    env = {**agent_env, "PERF_AGENT_PROFILE_SHAPES": "0"}  # as _windows: a test of segments
    done = subprocess.run(
        [sys.executable, str(script), str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout == "16\n"
    traces = list(out.glob("*/*/traces/*.pt.trace.json.gz"))
    # due after 2 steps, the window waits out step 2, the one the FLOPs count runs over
    assert [t.name for t in traces] == ["rank0-step3-8.pt.trace.json.gz"]
    trace = json.loads(gzip.decompress(traces[0].read_bytes()))
    steps = [e for e in trace["traceEvents"] if e.get("name") == "Optimizer.step#SGD.step"]
    assert len(steps) == 5
