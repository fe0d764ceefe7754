"""A loop that steps two optimizers an iteration (dcgan: D's, then G's) is one step an
iteration, for the agent's step count and for its profiler window's trace alike.

The trace of a window has no ProfilerStep markers, so the loader ends a step at each
`Optimizer.step`: dcgan's 5-step window read as 10 steps of half the time (and half the
operators per step). The window's name says how many steps it spans.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfweb_recommender.api import analyze_path
from perfweb_recommender.trace.loader import load_trace, window_steps
from tests.recommender.offline_runs import attach_with_a_window


def _x(name: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "args": {}}


def _two_optimizer_window(path: Path, iterations: int) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 990, "dur": 5, "args": {}}]
    for i in range(iterations):  # G's step ends iteration i-1's ... D's ends the boundary
        base = 1000.0 + 100 * i
        events += [
            _x("Optimizer.step#Adam.step", base + 10, 10),
            _x("Optimizer.step#Adam.step", base + 80, 20),
        ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_window_with_two_optimizer_steps_a_step_has_as_many_steps_as_its_name_says(
    tmp_path: Path,
) -> None:
    assert window_steps("rank0-step20-25.pt.trace.json.gz") == 5
    assert window_steps("trace.json") is None
    trace = load_trace(_two_optimizer_window(tmp_path / "rank0-step20-23.pt.trace.json", 3))
    assert [round(s.dur) for s in trace.steps] == [110, 100, 100]
    # a trace not named by the agent keeps one step per Optimizer.step
    assert len(load_trace(_two_optimizer_window(tmp_path / "other.json", 3)).steps) == 6


GAN = """
import torch
from torch import nn

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
netD = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
bce = nn.BCEWithLogitsLoss()
for i in range(30):  # dcgan's iteration: three backwards, D's step, then G's
    real, noise = torch.randn(16, 16), torch.randn(16, 8)
    netD.zero_grad()
    bce(netD(real), torch.ones(16, 1)).backward()
    fake = netG(noise)
    bce(netD(fake.detach()), torch.zeros(16, 1)).backward()
    optD.step()
    netG.zero_grad()
    bce(netD(fake), torch.ones(16, 1)).backward()
    optG.step()
print("done")
"""


@pytest.mark.slow
def test_a_gan_counts_one_step_an_iteration_and_its_trace_too(tmp_path: Path) -> None:
    script, offline = tmp_path / "gan.py", tmp_path / "offline"
    script.write_text(GAN)
    result = attach_with_a_window(script, offline)
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr[-2000:]
    report = analyze_path(offline)
    assert (report.run["steps"], report.run["steps_source"]) == (30, "optimizer")
    assert len(report.traces) == 1
    assert len(report.traces[0].steps) == 5, report.traces[0].source
