"""`import perfweb_agent; perfweb_agent.attach(...)` inside a script: offline layout, upload, fork
safety."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from perfweb_agent.cli.main import main as cli_main
from tests.agent.conftest import ROOT, write_script
from tests.agent.fakeserver import TOKEN, FakeServer

FORKING = """
import os, sys, threading, time
import perfweb_agent
a = perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=0.1)
for _ in range(3):
    perfweb_agent.step()
# fork while another thread holds the agent's sample lock: the child must not deadlock
lock = a.batches.samples._lock
lock.acquire()
pid = os.fork()
if pid == 0:
    for _ in range(5):
        perfweb_agent.step()
    a.batches.samples.add("process", "child.sample", time.time(), 1.0)
    perfweb_agent.shutdown()
    sys.exit(0)  # a normal exit: atexit runs in the child too
lock.release()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
sys.exit(4)
"""

FORKED_TRAINERS = """
import os, sys, torch
from torch import nn
import perfweb_agent
a = perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=0.1)
lock = a.batches.samples._lock
children = []
for seed in range(2):
    lock.acquire()  # held at the fork: the child must neither deadlock nor send the parent's
    pid = os.fork()
    if pid == 0:
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(6):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
        os._exit(0)  # no atexit: the agent flushes at os._exit
    lock.release()
    children.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children])
"""

# Every import an agent thread makes, with the profiler on: a fork while one of them held a
# module's import lock left the child waiting on it for ever (the idna codec, imported by the
# network thread's first getaddrinfo, hung the forked trainers 2 runs in 6 on a busy host).
IMPORTS_ON_AGENT_THREADS = """
import sys, threading
imported = []
def audit(event, args):
    if event == "import" and threading.current_thread().name.startswith("perf-agent"):
        imported.append((threading.current_thread().name, args[0]))
sys.addaudithook(audit)
import time, torch, perfweb_agent
perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=0.1)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    time.sleep(0.02)
time.sleep(0.3)
perfweb_agent.shutdown()
print(sorted(set(imported)))
"""

# A forked rank whose flush cannot finish (its resolver blocks for ever, as on a lock the
# parent's network thread held at the fork) still leaves at os._exit, with its own status.
FORKED_TRAINER_WHOSE_FLUSH_BLOCKS = """
import os, socket, sys, threading, torch
import perfweb_agent
perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=5)
pid = os.fork()
if pid == 0:
    socket.getaddrinfo = lambda *args, **kwargs: threading.Event().wait()
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    os._exit(3)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""

WORKER_THAT_BACKPROPAGATES = """
import sys, torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
import perfweb_agent
perfweb_agent.attach(server=sys.argv[1], token=sys.argv[2], interval=0.05, flush_interval=0.1)

class Adversarial(Dataset):  # each sample nudged along its own gradient, in the worker
    def __len__(self):
        return 16
    def __getitem__(self, i):
        x = torch.randn(8, requires_grad=True)
        (x * x).sum().backward()
        return (x + 0.01 * x.grad).detach()

model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(Adversarial(), batch_size=4, num_workers=1):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print("done")
"""

OFFLINE = """
import sys, perfweb_agent
perfweb_agent.attach(offline=sys.argv[1], name="offline-demo", tags={"team": "vision"},
             interval=0.05, flush_interval=0.1)
import time
for _ in range(4):
    time.sleep(0.05)
    perfweb_agent.step()
"""


def test_a_forked_child_sends_nothing_and_does_not_deadlock(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, FORKING)
    result = subprocess.run(
        [sys.executable, str(script), server.url, TOKEN],
        env=agent_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (result.returncode, result.stdout) == (4, "child 0\n"), result.stderr
    assert len(server.store.starts) == 1
    assert server.store.steps() == [0, 1, 2]
    assert server.store.metric("process", "child.sample") == []
    (finish,) = server.store.finishes.values()
    assert finish["final"] is True and finish["exit_code"] == 4  # standalone: it ends the run


def test_forked_children_that_train_report_each_as_a_rank_and_leave_the_run_to_the_parent(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, FORKED_TRAINERS)
    result = subprocess.run(
        [sys.executable, str(script), server.url, TOKEN],
        env=agent_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stdout) == (0, "[0, 0]\n"), result.stderr
    starts = server.store.starts
    children = {agent: body for agent, body in starts.items() if body["rank"] is not None}
    assert len(starts) == 3 and sorted(b["rank"] for b in children.values()) == [0, 1]
    assert all(body["facts"]["agent.forked"] for body in children.values())
    for agent in children:
        assert server.store.steps(agent) == list(range(6))
        assert server.store.finishes[agent]["final"] is False  # the parent ends the run
    (parent,) = set(starts) - set(children)
    assert server.store.steps(parent) == []
    assert server.store.finishes[parent]["final"] is True


def test_the_agents_threads_import_nothing_so_a_fork_never_inherits_a_held_import_lock(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, IMPORTS_ON_AGENT_THREADS)
    env = dict(agent_env, PERF_AGENT_PROFILE="1", PERF_AGENT_PROFILE_WARMUP_STEPS="2")
    env.update(PERF_AGENT_PROFILE_STEPS="3")
    result = subprocess.run(
        [sys.executable, str(script), server.url, TOKEN],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr
    assert server.store.steps() == list(range(12)) and server.store.trace("rank0")  # a window


def test_a_forked_rank_whose_flush_blocks_still_leaves_at_os_exit_with_its_status(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, FORKED_TRAINER_WHOSE_FLUSH_BLOCKS)
    result = subprocess.run(  # a hang is the failure: the timeout ends it
        [sys.executable, str(script), server.url, TOKEN],
        env=agent_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (0, "3\n"), result.stderr


def test_a_dataloader_worker_that_runs_a_backward_still_sends_nothing(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, WORKER_THAT_BACKPROPAGATES)
    result = subprocess.run(
        [sys.executable, str(script), server.url, TOKEN],
        env=agent_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stdout) == (0, "done\n"), result.stderr
    assert len(server.store.starts) == 1  # the script; its loader's worker is no rank
    assert server.store.steps() == [0, 1, 2, 3]


def test_offline_writes_the_protocol_layout_and_upload_sends_it_once(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str], capsys
) -> None:
    out = tmp_path / "offline"
    script = write_script(tmp_path, OFFLINE)
    subprocess.run(
        [sys.executable, str(script), str(out)], env=agent_env, cwd=ROOT, check=True, timeout=30
    )
    (run_dir,) = out.iterdir()
    (agent_dir,) = run_dir.iterdir()
    names = sorted(p.name for p in agent_dir.iterdir())
    assert names[0].startswith("batch-0000000") and names[-2:] == ["finish.json", "start.json"]
    start = json.loads((agent_dir / "start.json").read_text())
    assert start["name"] == "offline-demo" and start["tags"] == {"team": "vision"}
    assert start["run_id"] == run_dir.name and start["agent_id"] == agent_dir.name
    first = json.loads(gzip.decompress((agent_dir / "batch-00000000.json.gz").read_bytes()))
    assert first["seq"] == 0 and first["run_id"] == run_dir.name

    argv = ["upload", str(out), "--server", server.url, "--token", TOKEN]
    assert cli_main(argv) == 0
    assert cli_main(argv) == 0  # idempotent: the second upload stores nothing new
    assert server.store.steps() == [0, 1, 2, 3]
    assert server.store.duplicates == len(server.store.batches)
    assert "were already stored" in capsys.readouterr().out
