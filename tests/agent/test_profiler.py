"""Profiler windows: after warm-up on a schedule, on demand, compressed, bounded."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from agent.traces import chunk_bodies
from tests.agent.conftest import ROOT, write_script
from tests.agent.fakeserver import TOKEN, FakeServer

TRAIN = """
import sys, time, torch, agent
if sys.argv[1] != "-":
    kwargs = dict(offline=sys.argv[1])
else:
    kwargs = dict(server=sys.argv[2], token=sys.argv[3])
agent.attach(interval=0.05, flush_interval=0.1, profile=True, profile_warmup_steps=int(sys.argv[4]),
             profile_steps=2, profile_every_s=3600, **kwargs)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(int(sys.argv[5])):
    opt.zero_grad()
    model(torch.randn(16, 32)).sum().backward()
    opt.step()
    time.sleep(0.03)
"""


def run(script: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(script), *args], env=env, cwd=ROOT, check=True,
                   timeout=60)


def test_after_warm_up_a_window_is_written_to_the_offline_directory(
    tmp_path: Path, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, TRAIN)
    out = tmp_path / "offline"
    run(script, agent_env, str(out), "-", "-", "3", "12")
    traces = list(out.glob("*/*/traces/*.pt.trace.json.gz"))
    assert len(traces) == 1  # warm-up window only: the next is an hour away
    assert traces[0].name == "rank0-step3-5.pt.trace.json.gz"
    trace = json.loads(gzip.decompress(traces[0].read_bytes()))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "Optimizer.step#SGD.step" in names


def test_a_capture_trace_command_opens_a_window_and_the_trace_is_uploaded_in_chunks(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    server.commands = [{"type": "capture_trace", "steps": 3}]
    script = write_script(tmp_path, TRAIN)
    run(script, agent_env, "-", server.url, TOKEN, "100000", "40")
    trace = json.loads(gzip.decompress(server.store.trace("rank0-step")))
    assert trace["traceEvents"]


def test_chunks_are_bounded_and_reassemble() -> None:
    data = bytes(range(256)) * 41
    bodies = chunk_bodies("r" * 32, "a" * 32, "t", data, chunk_bytes=1000)
    assert len(bodies) == 11 and {b["chunks"] for b in bodies} == {11}
    import base64

    assert b"".join(base64.b64decode(b["data"]) for b in bodies) == data


def test_a_server_without_the_trace_endpoint_gets_no_more_windows_and_the_trace_is_kept(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    server.has_trace_endpoint = False
    script = write_script(tmp_path, TRAIN.replace("profile_every_s=3600", "profile_every_s=0.01"))
    run(script, agent_env, "-", server.url, TOKEN, "3", "25")
    kept = list((tmp_path / "spill").glob("*/*/traces/*.pt.trace.json.gz"))
    # windows of 2 steps could open every 3 steps; they stop once the server answers 404
    # (one more may already be open by the time the first trace's upload hears it)
    assert 1 <= len(kept) <= 2
    assert "kept on disk" in server.store.facts()["profiler.last_trace"]
