"""The CPU's peak (agent/perfweb_agent/runtime/flops.py): probed once, kept per host, reused
by short runs at the share of the CPU their thread had, never a failure of the run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from perfweb_agent.runtime import flops
from perfweb_agent.runtime.flops import PeakCache, host_peak, peak_key, thread_wait_share
from perfweb_recommender.compute import utilisation
from perfweb_recommender.offline import find_runs, load_run
from tests.agent.conftest import attach, write_script

GFLOPS = 1e9


class Probe:
    """A stand-in for the matmul probe: what it 'measured', and how often it ran."""

    def __init__(self, figure: float) -> None:
        self.figure, self.calls = figure, 0

    def __call__(self, torch_module: Any) -> dict[str, Any]:
        self.calls += 1
        return {"cpu.peak_flops": self.figure, "cpu.peak_threads": 2, "cpu.peak_size": 1024}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_short_run_reuses_the_probed_peak_at_its_own_share_of_the_cpu(tmp_path: Path) -> None:
    cache, probe = PeakCache(str(tmp_path)), Probe(40 * GFLOPS)
    first = host_peak(torch, cache, run_s=5.0, probe=probe)
    assert (probe.calls, first["cpu.peak_flops"]) == (1, 40 * GFLOPS)
    assert "cpu.peak_probed_at" not in first  # measured by this run
    # the next run's thread ran 3 s and waited 1 s for a CPU: it had 3/4 of it
    quiet_start, busy_end = (0, 0), (3_000_000_000, 1_000_000_000)
    second = host_peak(torch, cache, run_s=5.0, run_sched=(quiet_start, busy_end), probe=probe)
    assert probe.calls == 1, "a short run probes no more once the host's peak is known"
    assert second["cpu.peak_flops"] == pytest.approx(30 * GFLOPS)
    assert second["cpu.peak_size"] == 1024 and second["cpu.peak_probed_at"] > 0


def test_a_long_run_probes_anyway_and_the_cache_keeps_the_higher_figure(tmp_path: Path) -> None:
    cache = PeakCache(str(tmp_path))
    host_peak(torch, cache, run_s=5.0, probe=Probe(40 * GFLOPS))
    lower = Probe(20 * GFLOPS)  # a moment a neighbour took half of the cores from
    long_run = host_peak(torch, cache, run_s=flops.PROBE_ANYWAY_AFTER_S, probe=lower)
    assert (lower.calls, long_run["cpu.peak_flops"]) == (1, 20 * GFLOPS)  # its own share
    assert cache.fresh(peak_key(torch))["free_flops"] == pytest.approx(40 * GFLOPS)


def test_an_entry_past_its_age_is_probed_again(tmp_path: Path) -> None:
    clock = Clock()
    cache = PeakCache(str(tmp_path), clock=clock)
    host_peak(torch, cache, run_s=5.0, probe=Probe(40 * GFLOPS))
    clock.now += flops.PEAK_CACHE_TTL_S
    again = Probe(35 * GFLOPS)
    assert host_peak(torch, cache, run_s=5.0, probe=again)["cpu.peak_flops"] == 35 * GFLOPS
    assert again.calls == 1
    assert cache.fresh(peak_key(torch))["free_flops"] == pytest.approx(35 * GFLOPS)


def test_the_probe_s_own_wait_for_a_cpu_is_taken_out_of_what_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readings = iter([(0, 0), (1_000_000_000, 1_000_000_000)])  # ran 1 s, waited 1 s
    monkeypatch.setattr(flops, "thread_schedstat", lambda: next(readings))
    cache = PeakCache(str(tmp_path))
    assert host_peak(torch, cache, run_s=5.0, probe=Probe(20 * GFLOPS))["cpu.peak_flops"] == (
        20 * GFLOPS
    )
    assert cache.fresh(peak_key(torch))["free_flops"] == pytest.approx(40 * GFLOPS)


@pytest.mark.parametrize("content", ["not json", '{"entries": []}', '{"entries": {"k": 1}}'])
def test_a_broken_cache_file_is_probed_over(tmp_path: Path, content: str) -> None:
    (tmp_path / flops.PEAK_CACHE_FILE).write_text(content)
    probe = Probe(40 * GFLOPS)
    assert host_peak(torch, PeakCache(str(tmp_path)), run_s=5.0, probe=probe)["cpu.peak_flops"]
    assert probe.calls == 1
    stored = json.loads((tmp_path / flops.PEAK_CACHE_FILE).read_text())["entries"]
    assert stored[peak_key(torch)]["free_flops"] == 40 * GFLOPS


def test_an_unwritable_cache_never_fails_the_run(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache's folder would be
    probe = Probe(40 * GFLOPS)
    facts = host_peak(torch, PeakCache(str(blocked / "cache")), run_s=5.0, probe=probe)
    assert facts["cpu.peak_flops"] == 40 * GFLOPS


def test_the_wait_share_of_two_readings() -> None:
    assert thread_wait_share((10, 5), (40, 15)) == pytest.approx(10 / 40)
    assert thread_wait_share(None, (40, 15)) == 0.0
    assert thread_wait_share((40, 15), (40, 15)) == 0.0  # nothing ran: no share to read
    if Path("/proc/thread-self/schedstat").exists():
        ran, waited = flops.thread_schedstat() or (0, -1)
        assert ran > 0 and waited >= 0


MATMUL = """
import torch
w = torch.nn.Parameter(torch.randn(256, 256) / 16)
opt = torch.optim.SGD([w], lr=1e-9)
x = torch.randn(256, 256)
for step in range(6):
    (x @ w @ w).sum().backward()
    opt.step()
    opt.zero_grad()
print("done")
"""


def test_the_second_attached_run_on_a_host_takes_its_peak_from_the_cache(
    tmp_path: Path, agent_env: dict[str, str]
) -> None:
    script = write_script(tmp_path, MATMUL)
    env = {**agent_env, "PERF_AGENT_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "2"}
    facts = []
    for run in ("first", "second"):
        out = tmp_path / run
        result = attach(["--offline", str(out), "--", sys.executable, str(script)], env)
        assert (result.returncode, result.stdout) == (0, "done\n")
        evidence, _ = load_run(find_runs(out)[-1])
        assert utilisation(evidence).mfu is not None, utilisation(evidence).text()
        facts.append(evidence)
    first, second = facts
    assert first.fact("cpu.peak_probed_at") is None  # probed at its exit
    assert second.fact("cpu.peak_probed_at") is not None
    assert second.fact("cpu.peak_size") == first.fact("cpu.peak_size")
    assert (tmp_path / "cache" / flops.PEAK_CACHE_FILE).exists()
