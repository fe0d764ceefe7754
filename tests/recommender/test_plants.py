"""CPU plants (real torch, the real agent attached offline): each flag rule fires on the bad
case and stays quiet on the good one.

- distributed.find_unused_parameters: DDP with `find_unused_parameters=True` where every
  parameter gets a gradient (the flag is waste: fires) vs. a model with an unused branch (the
  flag is needed; turning it off would crash DDP: quiet).
- distributed.reduce_then_broadcast: `dist.reduce` then `dist.broadcast` of one tensor every
  step (fires) vs. one `dist.all_reduce` (quiet).
- precision.scaler_misuse: fp16 autocast with `GradScaler(enabled=False)` (fires, critical,
  ranked first) vs. an enabled GradScaler (quiet).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfweb_recommender.api import analyze_path

REPO = Path(__file__).resolve().parents[2]
PLANT = r"""
import socket, sys, torch, torch.distributed as dist
from torch import nn

case = sys.argv[1]
torch.manual_seed(0)

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.used, self.unused = nn.Linear(8, 8), nn.Linear(8, 1), nn.Linear(8, 1)
    def forward(self, x, both):
        h = self.body(x)
        return self.used(h) + (self.unused(h) if both else 0)

if case in ("ddp_all_used", "ddp_unused", "reduce_broadcast", "all_reduce"):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
if case.startswith("ddp"):
    model = nn.parallel.DistributedDataParallel(TwoHeads(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(6):
        opt.zero_grad()
        model(torch.randn(4, 8), case == "ddp_all_used").sum().backward()
        opt.step()
elif case in ("reduce_broadcast", "all_reduce"):
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(6):
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        metric = loss.detach().clone()
        if case == "reduce_broadcast":
            dist.reduce(metric, dst=0)
            dist.broadcast(metric, src=0)
        else:
            dist.all_reduce(metric)
        opt.step()
else:
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", enabled=(case == "scaler_enabled"))
    for _ in range(6):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(4, 8)).float().sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
if dist.is_initialized():
    dist.destroy_process_group()
print("done")
"""
CASES = {  # case -> (rule, fires)
    "ddp_all_used": ("distributed.find_unused_parameters", True),
    "ddp_unused": ("distributed.find_unused_parameters", False),
    "reduce_broadcast": ("distributed.reduce_then_broadcast", True),
    "all_reduce": ("distributed.reduce_then_broadcast", False),
    "scaler_disabled": ("precision.scaler_misuse", True),
    "scaler_enabled": ("precision.scaler_misuse", False),
}

pytestmark = pytest.mark.slow


def _attach_offline(tmp_path: Path, case: str) -> Path:
    script = tmp_path / "plant.py"
    script.write_text(PLANT)
    offline = tmp_path / "offline"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    env.update(PERF_AGENT_INTERVAL="0.2", PERF_AGENT_PROFILE="0", PYTHONPATH=str(REPO))
    env.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfweb_agent.cli.main",
            "attach",
            "--offline",
            str(offline),
            "--",
            sys.executable,
            str(script),
            case,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr[-2000:]
    return offline


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_flag_rule_fires_on_the_bad_plant_and_not_on_the_good(
    tmp_path: Path, case: str
) -> None:
    rule_id, fires = CASES[case]
    report = analyze_path(_attach_offline(tmp_path, case))
    ids = [f.id for f in report.findings]
    assert (rule_id in ids) is fires, ids
    if fires and rule_id == "precision.scaler_misuse":
        assert ids[0] == rule_id and report.findings[0].critical
