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
lock = a.sender.samples._lock
lock.acquire()
pid = os.fork()
if pid == 0:
    for _ in range(5):
        perfweb_agent.step()
    a.sender.samples.add("process", "child.sample", time.time(), 1.0)
    perfweb_agent.shutdown()
    sys.exit(0)  # a normal exit: atexit runs in the child too
lock.release()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
sys.exit(4)
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
        [sys.executable, str(script), server.url, TOKEN], env=agent_env, cwd=ROOT,
        capture_output=True, text=True, timeout=30,
    )
    assert (result.returncode, result.stdout) == (4, "child 0\n"), result.stderr
    assert len(server.store.starts) == 1
    assert server.store.steps() == [0, 1, 2]
    assert server.store.metric("process", "child.sample") == []
    (finish,) = server.store.finishes.values()
    assert finish["final"] is True and finish["exit_code"] == 4  # standalone: it ends the run


def test_offline_writes_the_protocol_layout_and_upload_sends_it_once(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str], capsys
) -> None:
    out = tmp_path / "offline"
    script = write_script(tmp_path, OFFLINE)
    subprocess.run([sys.executable, str(script), str(out)], env=agent_env, cwd=ROOT,
                   check=True, timeout=30)
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
