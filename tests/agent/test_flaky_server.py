"""A training script under attach while the server is down, failing and rate-limiting."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.agent.conftest import ROOT, online, write_script
from tests.agent.fakeserver import FakeServer

TRAIN = """
import time, torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(120):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    time.sleep(0.01)
print(f"loss {nn.functional.mse_loss(model(x), y).item():.6f}")
raise SystemExit(5)
"""


def test_down_then_500s_then_429_then_healthy_loses_and_doubles_nothing(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, TRAIN)
    agent_env = {**agent_env, "PERF_AGENT_BACKOFF_BASE": "0.1", "PERF_AGENT_BACKOFF_MAX": "1"}
    server.down()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "attach",
            *online(server),
            "--",
            sys.executable,
            str(script),
        ],
        env=agent_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    server.fail_next = ["500", "500", "500", "429"]
    server.up()
    out, err = proc.communicate(timeout=60)
    baseline = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**agent_env, "PYTHONPATH": ""},
    )
    assert proc.returncode == 5 == baseline.returncode
    assert out == baseline.stdout  # same loss: the agent changed nothing in the training
    worker = next(a for a, s in server.store.starts.items() if s["role"] == "worker")
    finish = server.store.finishes[worker]
    produced = finish["produced"]
    assert produced["dropped"] == 0
    assert server.store.samples(worker) == produced["samples"]
    steps = server.store.steps(worker)
    assert steps == list(range(produced["steps"]))
    assert produced["steps"] == 120
    assert server.store.statuses[500] == 3 and server.store.statuses[429] == 1
    finals = [f for f in server.store.finishes.values() if f["final"]]
    assert len(finals) == 1 and finals[0]["exit_code"] == 5
