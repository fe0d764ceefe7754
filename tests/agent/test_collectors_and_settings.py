"""Process collector, settings from the environment, torchrun ranks, doctor."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfweb_agent.cli.doctor import doctor, server_lines
from perfweb_agent.collectors.process import ProcessCollector, ProcfsSource, PsutilSource
from perfweb_agent.core.config import load_settings, settings_env
from perfweb_contract import protocol
from tests.agent.conftest import ROOT, attach, online, write_script
from tests.agent.fakeserver import TOKEN, FakeServer
from tests.agent.nvml_fixtures import H100_LOAD, RecordedNvml


class FakeSource:
    def own(self) -> tuple[float, float, float]:
        return 150.0, 2e9, 12.0

    def children(self) -> tuple[float, float, float, int]:
        return 180.0, 3e9, 8.0, 2


def test_process_collector_reports_the_process_and_its_workers_summed() -> None:
    samples = ProcessCollector(FakeSource(), clock=lambda: 5.0).collect()
    values = {(d, n): v for d, n, _, v in samples}
    assert values[("process", "process.cpu_percent")] == 150.0
    assert values[("process", "process.rss")] == 2e9
    assert values[("workers", "process.rss")] == 3e9
    assert values[("workers", "process.count")] == 2


def test_psutil_and_procfs_sources_agree_on_this_process_and_its_children() -> None:
    import subprocess

    pytest.importorskip("psutil")
    # Measure once both children are fully started: a starting interpreter's RSS still grows
    # between the two sources' reads.
    ready = "import time; print('ready', flush=True); time.sleep(5)"
    kids = [
        subprocess.Popen([sys.executable, "-c", ready], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for kid in kids:
            assert kid.stdout is not None and kid.stdout.readline().strip() == "ready"
        procfs, psutil_source = ProcfsSource(), PsutilSource()
        rss_psutil, rss_proc = psutil_source.own()[1], procfs.own()[1]
        assert abs(rss_psutil - rss_proc) / rss_psutil < 0.2
        by_procfs, by_psutil = procfs.children(), psutil_source.children()
        assert by_procfs is not None and by_psutil is not None
        assert by_procfs[3] == by_psutil[3] == 2
        assert abs(by_procfs[1] - by_psutil[1]) / by_psutil[1] < 0.2
        assert {k.pid for k in kids} <= procfs.pids
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()


def test_the_procfs_source_counts_the_children_that_are_runnable() -> None:
    """A child that computes is runnable at every read; one that sleeps is not."""
    import subprocess

    codes = [
        "import time; print('ready', flush=True); time.sleep(30)",
        "print('ready', flush=True)\nwhile True: pass",
    ]
    kids = [
        subprocess.Popen([sys.executable, "-c", c], stdout=subprocess.PIPE, text=True)
        for c in codes
    ]
    try:
        for kid in kids:
            assert kid.stdout is not None and kid.stdout.readline().strip() == "ready"
        source = ProcfsSource()
        for _ in range(500):  # until the sleeper is past its print and asleep
            assert source.children() is not None
            if source.runnable_children == 1:
                break
            time.sleep(0.01)
        assert source.runnable_children == 1
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()


def test_settings_come_from_env_and_round_trip_to_children() -> None:
    env = {
        protocol.ENV_SERVER: "http://s:8000",
        protocol.ENV_TOKEN: "t",
        "PERF_AGENT_NAME": "resnet",
        "PERF_AGENT_INTERVAL": "0.1",
        "PERF_AGENT_TAGS": "team=vision,exp=3",
        protocol.ENV_RUN_ID: "abcdef0123",
    }
    settings = load_settings(env, tags=["extra=1"])
    assert (settings.server, settings.token, settings.name) == ("http://s:8000", "t", "resnet")
    assert settings.interval == 0.1 and settings.run_id == "abcdef0123"
    assert settings.tags == {"team": "vision", "exp": "3", "extra": "1"}
    again = load_settings(settings_env(settings))
    assert (again.run_id, again.tags, again.server, again.launched) == (
        settings.run_id,
        settings.tags,
        settings.server,
        True,
    )


def test_bad_settings_fall_back_to_defaults_instead_of_raising() -> None:
    settings = load_settings({"PERF_AGENT_INTERVAL": "fast", protocol.ENV_RUN_ID: "bad id!"})
    assert settings.interval == 1.0 and protocol.RUN_ID_RE.match(settings.run_id)


def test_doctor_says_what_it_sees_in_a_few_lines(server: FakeServer) -> None:
    report = doctor(server.url, TOKEN, query=RecordedNvml([H100_LOAD]))
    text = "\n".join(report.lines)
    assert not report.server_failed
    assert "NVML: driver 590.48.01, 1 GPU(s)" in text
    assert "gpu:0: NVIDIA H100 80GB HBM3, 80 GiB" in text
    assert "torch: 2." in text
    assert "reachable; token valid" in text
    assert "token rejected" in server_lines(server.url, "nope")[0]
    assert "unreachable" in server_lines("http://127.0.0.1:9", TOKEN)[0]


def _doctor_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_")}
    return subprocess.run(
        [sys.executable, "-m", "perfweb_agent.cli.main", "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.slow
def test_doctor_exits_1_when_the_server_fails_so_it_can_gate_a_job_script(
    server: FakeServer,
) -> None:
    healthy = _doctor_cli("--server", server.url, "--token", TOKEN)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "token valid" in healthy.stdout
    rejected = _doctor_cli("--server", server.url, "--token", "nope")
    assert rejected.returncode == 1 and "token rejected" in rejected.stdout
    unreachable = _doctor_cli("--server", "http://127.0.0.1:9", "--token", TOKEN)
    assert unreachable.returncode == 1 and "unreachable" in unreachable.stdout
    no_server = _doctor_cli()
    assert no_server.returncode == 0 and "none configured" in no_server.stdout


TORCHRUN_SCRIPT = """
import os, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
print("rank", os.environ["RANK"])
"""


@pytest.mark.slow
def test_each_torchrun_rank_reports_as_a_rank_of_the_same_run(
    tmp_path: Path, server: FakeServer, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, TORCHRUN_SCRIPT)
    torchrun = Path(sys.executable).with_name("torchrun")
    result = attach(
        [*online(server), "--", str(torchrun), "--nproc-per-node", "2", str(script)],
        agent_env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    starts = list(server.store.starts.values())
    assert {s["role"] for s in starts} == {"launcher", "worker"}
    workers = [s for s in starts if s["role"] == "worker"]
    assert sorted(w["rank"] for w in workers) == [0, 1]  # torchrun itself does not report
    assert len({s["run_id"] for s in starts}) == 1
    ranks = {b["steps"]["rank"] for b in server.store.batches.values() if "steps" in b}
    assert ranks == {0, 1}


def test_procfs_first_reading_is_the_average_since_start_not_zero() -> None:
    import subprocess

    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
    burn += "print('ready', flush=True); time.sleep(5)"
    kid = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert kid.stdout is not None and kid.stdout.readline().strip() == "ready"
        cpu, rss, threads = ProcfsSource(pid=kid.pid).own() or (0.0, 0.0, 0.0)
        assert 5.0 < cpu <= 100.0 * (os.cpu_count() or 1)  # it did burn CPU since it started
        assert rss > 0 and threads >= 1
    finally:
        kid.kill()
        kid.wait()
