"""Real CPU training scripts under `perf-agent attach`: step timings and facts come out right."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from tests.agent.conftest import attach, online, write_script
from tests.agent.fakeserver import FakeServer

SLOW_DATA = """
import time, torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.randn(8), torch.randn(1)

model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(Slow(), batch_size=4, num_workers=0)
for x, y in loader:
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
print("ok")
"""

FACTS = """
import time, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
loader = DataLoader(data, batch_size=8, num_workers=2, pin_memory=False, prefetch_factor=3)
model = nn.DataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
opt = torch.optim.Adam(model.parameters())
scaler = torch.amp.GradScaler("cpu")
torch.backends.cudnn.benchmark = True
for x, y in loader:
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    torch.cuda.empty_cache()
    torch.cuda.empty_cache()
    time.sleep(0.05)  # workers alive across a few agent ticks
print("steps", len(loader))
"""

INFERENCE = """
import torch, perfweb_agent
model = torch.nn.Linear(4, 4).eval()
with torch.no_grad():
    for _ in range(5):
        model(torch.randn(2, 4))
        perfweb_agent.step()
"""


def test_a_slow_dataset_without_workers_shows_most_of_each_step_as_data_wait(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, SLOW_DATA)
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    assert (result.returncode, result.stdout) == (0, "ok\n")
    steps = server.store.step_columns()
    assert steps["index"] == list(range(16))
    shares = []
    for duration, wait in zip(steps["duration"][1:], steps["data_wait"][1:], strict=True):
        # each step sleeps 4 x 10 ms in __getitem__: at least that is data wait, whatever
        # the host; a busy one may preempt a step's ~1 ms of compute for a time slice
        assert 0.035 <= wait <= duration < 1.0
        shares.append(wait / duration)
    assert statistics.median(shares) > 0.7
    facts = server.store.facts()
    assert facts["dataloader.0.num_workers"] == 0
    assert facts["dataloader.0.batch_size"] == 4
    assert facts["training.backward"] is True


def test_facts_name_dataparallel_loader_settings_amp_and_empty_cache_per_step(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, FACTS)
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    assert (result.returncode, result.stdout) == (0, "steps 12\n")
    facts = server.store.facts()
    assert facts["parallel.mode"] == "dataparallel"
    assert facts["dataloader.0.num_workers"] == 2
    assert facts["dataloader.0.prefetch_factor"] == 3
    assert facts["dataloader.0.pin_memory"] is False
    assert facts["dataloader.0.persistent_workers"] is False
    assert facts["cuda.empty_cache_calls"] == 24
    assert facts["cuda.empty_cache_per_step"] == 2.0
    assert facts["amp.autocast"] is True
    assert facts["amp.autocast_dtype"] == "torch.bfloat16"
    assert facts["cudnn.benchmark"] is True
    assert facts["amp.grad_scaler"] is True and facts["amp.scaler_steps"] == 12
    assert facts["amp.scaler_updates"] == 12
    assert facts["amp.scaler_step_without_update"] is False
    assert len(server.store.starts) == 2  # launcher + script: DataLoader workers stay silent
    assert server.store.metric("workers", "process.rss")
    assert facts["cuda.initialized"] is False  # the agent never initialises CUDA
    assert facts["torch.version"].startswith("2.")
    assert facts["threads.omp_num_threads"] == "1"
    assert server.store.steps() == list(range(12))


def test_agent_step_marks_steps_in_a_loop_without_optimizer(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, INFERENCE)
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    assert result.returncode == 0, result.stderr
    assert server.store.steps() == [0, 1, 2, 3, 4]
    assert server.store.facts()["training.backward"] is False


DDP = """
import socket, torch, torch.distributed as dist
from torch import nn
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1), find_unused_parameters=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    try:
        torch.cuda.synchronize()  # a CPU build raises; the call still counts
    except Exception:
        pass
dist.destroy_process_group()
"""


def test_ddp_backend_init_method_find_unused_and_synchronize_per_step(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, DDP)
    result = attach([*online(server), "--", sys.executable, str(script)], agent_env)
    assert result.returncode == 0, result.stderr
    facts = server.store.facts()
    assert facts["parallel.mode"] == "ddp"
    assert facts["ddp.find_unused_parameters"] is True
    assert facts["distributed.backend"] == "gloo"
    assert facts["distributed.init_method"].startswith("tcp://127.0.0.1:")
    assert facts["distributed.world_size"] == 1
    assert facts["cuda.synchronize_calls"] == 4
    assert facts["cuda.synchronize_per_step"] == 1.0


THREADS_AFTER_THE_AGENT = """
import time, torch
from torch import nn
time.sleep(0.5)  # the agent's thread has sampled the facts by now, with torch's first count
torch.set_num_threads(1)  # then the script chooses its own, as a DDP rank often does
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    time.sleep(0.01)
print(torch.get_num_threads())
"""


def test_the_thread_count_is_the_training_threads_not_the_agent_threads(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, THREADS_AFTER_THE_AGENT)
    env = {**agent_env, "OMP_NUM_THREADS": "2", "PERF_AGENT_INTERVAL": "0.05"}
    result = attach([*online(server), "--", sys.executable, str(script)], env)
    assert (result.returncode, result.stdout) == (0, "1\n"), result.stderr
    assert server.store.facts()["threads.intra_op"] == 1
