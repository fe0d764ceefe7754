"""A guest never changes how its host ends: the profiler window over many loop shapes.

Each shape is a tiny script run bare once and attached (offline, the profiler on, its first
window after two steps) four times; every attached run must end with the bare run's exit
code and stdout, torch must not have lost track of the profiler's callbacks (its warnings
before the crash of issue 27), and the offline analysis must count the steps each shape
has. The crash of issue 27 came in 6 of 6 runs and torch's warnings come in every run that
loses a callback, so four runs a shape tell; they go two at a time (about 7 s a shape on a
quiet 2-core host).
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from perfweb_recommender.api import analyze_path
from tests.agent.conftest import ROOT, write_script

RUNS = 4
TORCH_LOST_ITS_CALLBACKS = ("Requested callback is not found", "Leaked callback handle")

SCRIPT = '''
import sys

import torch
from torch.autograd.profiler import record_function
from torch.utils.data import DataLoader, Dataset

SHAPE, WORKERS = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)


class Samples(Dataset):
    """Torch work in __getitem__, deterministic per index (also in a worker)."""

    def __len__(self):
        return 80 * 8

    def __getitem__(self, index):
        x = torch.arange(16, dtype=torch.float32) / (index + 1)
        for k in range(8):
            x = x + 0.01 * k
        return x, x.sum() / 16


def batches(count):
    loader = DataLoader(Samples(), batch_size=8, num_workers=WORKERS)
    for index, batch in enumerate(loader):
        if index == count:
            break
        yield batch


model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def loss_of(x, y):
    return ((model(x).squeeze(-1) - y) ** 2).mean()


def by_hand(x, y, lr=0.01):
    model.zero_grad()
    loss_of(x, y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-lr)


class Plain(torch.optim.Optimizer):
    """Plain SGD: torch still wraps its step (the `Optimizer.step#Plain.step` scope, the
    global post-hooks inside it), but it skips torch.optim's first-use import of
    torch._dynamo (1.5 s of CPU per process, which the real SGD shape pays)."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, {"lr": lr})

    def add_param_group(self, group):
        self.param_groups.append({**self.defaults, **group, "params": list(group["params"])})

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def train(count, optimizer, scopes=False):
    for x, y in batches(count):
        optimizer.zero_grad()
        if scopes:
            with record_function("user.forward"):
                loss = loss_of(x, y)
            with record_function("user.backward"):
                loss.backward()
        else:
            loss_of(x, y).backward()
        optimizer.step()


def evaluate(count):
    model.eval()
    with torch.no_grad():
        total = sum(float(loss_of(x, y)) for x, y in batches(count))
    model.train()
    return total


if SHAPE == "optimizer":  # user scopes in each step, one around the loop, one across steps
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    with record_function("user.epoch"):
        train(4, sgd, scopes=True)
        for index, (x, y) in enumerate(batches(12)):
            if index == 1:  # begins inside the window (steps 2-7) and stays open 2 steps
                across = record_function("user.across")
                across.__enter__()
            sgd.zero_grad()
            loss_of(x, y).backward()
            sgd.step()
            if index == 3:
                across.__exit__(None, None, None)
elif SHAPE == "eval_in_window":  # an eval pass, in a user scope, while the window records
    sgd = Plain(model.parameters())
    train(3, sgd)
    with record_function("user.eval"):
        print(round(evaluate(6), 4))
    train(6, sgd)
elif SHAPE == "backward":  # issue 27: too few to be told apart as steps before the exit
    for x, y in batches(30):
        by_hand(x, y)
elif SHAPE == "backward_reentrant":  # a checkpoint's own backward runs inside the loss's
    from torch.utils.checkpoint import checkpoint

    for x, y in batches(80):  # the window opens at step 64, in the loop
        model.zero_grad()
        out = checkpoint(model, x.requires_grad_(), use_reentrant=True)
        ((out.squeeze(-1) - y) ** 2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.01)
elif SHAPE == "optimizer_in_backward":  # every boundary falls inside a backward pass
    steppers = {p: Plain([p]) for p in model.parameters()}

    def step_in_backward(p):
        steppers[p].step()
        steppers[p].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_in_backward)
    for x, y in batches(16):
        loss_of(x, y).backward()
elif SHAPE == "module":  # inference: the window opens inside the eval pass and a user scope
    with record_function("user.eval"):
        print(round(evaluate(16), 4))
elif SHAPE == "dataloader":  # only the loader's batches mark steps
    print(round(sum(float(x.mean()) for x, _ in batches(16)), 4))
elif SHAPE == "exit_in_window":  # the script exits 3 while the window records
    sgd = Plain(model.parameters())
    train(3, sgd)
    print(round(evaluate(2), 4))
    sys.exit(3)
print(SHAPE, [round(float(p.detach().sum()), 4) for p in model.parameters()])
'''

# shape -> (DataLoader workers, steps the analysis must count, their source, traces)
SHAPES = {
    "optimizer": (0, 16, "optimizer", 1),
    "eval_in_window": (2, 9, "optimizer", 1),
    "backward": (0, 30, "backward", 0),  # the report says why (Coverage.profiler)
    "backward_reentrant": (0, 80, "backward", 1),
    "optimizer_in_backward": (0, 16, "optimizer", 0),
    "module": (0, 16, "module", 1),
    "dataloader": (2, 16, "dataloader", 1),
    "exit_in_window": (0, 3, "optimizer", 0),
}


def _env(tmp_path: Path, agent_env: dict[str, str]) -> dict[str, str]:
    env = dict(agent_env)
    env.update(
        PERF_AGENT_PROFILE="1",
        PERF_AGENT_PROFILE_WARMUP_STEPS="2",
        PERF_AGENT_PROFILE_STEPS="5",
        PERF_AGENT_SPILL_DIR=str(tmp_path / "spill"),
    )
    return env


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_it_ends_every_attached_run_as_the_bare_run_ends(
    shape: str, tmp_path: Path, agent_env: dict[str, str]
) -> None:
    workers, steps, source, traces = SHAPES[shape]
    script = write_script(tmp_path, SCRIPT, name="loop.py")
    args = [str(script), shape, str(workers)]
    env = _env(tmp_path, agent_env)
    bare = _run([sys.executable, *args], env)
    assert bare.stdout and "Traceback" not in bare.stderr, bare.stderr
    attach = [sys.executable, "-m", "perfweb_agent.cli.main", "attach", "--offline"]
    outs = [tmp_path / f"run{n}" for n in range(RUNS)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(
            pool.map(lambda out: _run([*attach, str(out), "--", sys.executable, *args], env), outs)
        )
    for run in runs:
        assert (run.returncode, run.stdout) == (bare.returncode, bare.stdout), run.stderr[-2000:]
        assert not [w for w in TORCH_LOST_ITS_CALLBACKS if w in run.stderr], run.stderr[-2000:]
    report = analyze_path(outs[-1])
    assert report.coverage is not None
    coverage = report.coverage
    assert (coverage.steps, coverage.steps_source, coverage.traces) == (steps, source, traces)
    assert traces or [n for n in coverage.profiler if n.startswith("profiler window skipped")]
