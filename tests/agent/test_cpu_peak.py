"""The CPU's peak (agent/perfweb_agent/runtime/flops.py): probed once, kept per host, reused
by short runs at the share of the CPU a small matmul gets at their exit, never a failure of
the run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from perfweb_agent.runtime import flops
from perfweb_agent.runtime.flops import PeakCache, host_peak, peak_key
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


class Rate:
    """A stand-in for the small matmul's rate: what the cores give it now."""

    def __init__(self, figure: float) -> None:
        self.figure = figure

    def __call__(self, torch_module: Any, n: int, repeats: int) -> float:
        assert (n, repeats) == (flops.SHARE_SIZE, flops.SHARE_REPEATS)
        return self.figure


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_short_run_reuses_the_probed_peak_at_its_own_share_of_the_cpu(tmp_path: Path) -> None:
    cache, probe = PeakCache(str(tmp_path)), Probe(40 * GFLOPS)
    first = host_peak(torch, cache, run_s=5.0, probe=probe, rate=Rate(20 * GFLOPS))
    assert (probe.calls, first["cpu.peak_flops"]) == (1, 40 * GFLOPS)
    assert "cpu.peak_probed_at" not in first  # measured by this run
    # the next run ends while a neighbour holds a core: the small matmul runs at 3/4
    second = host_peak(torch, cache, run_s=5.0, probe=probe, rate=Rate(15 * GFLOPS))
    assert probe.calls == 1, "a short run probes no more once the host's peak is known"
    assert second["cpu.peak_flops"] == pytest.approx(30 * GFLOPS)
    assert second["cpu.peak_share"] == 0.75
    assert second["cpu.peak_size"] == 1024 and second["cpu.peak_probed_at"] > 0
    quieter = host_peak(torch, cache, run_s=5.0, probe=probe, rate=Rate(25 * GFLOPS))
    assert quieter["cpu.peak_flops"] == 40 * GFLOPS  # never above what was probed


def test_a_long_run_probes_anyway_and_the_cache_keeps_the_higher_peak(tmp_path: Path) -> None:
    cache = PeakCache(str(tmp_path))
    host_peak(torch, cache, run_s=5.0, probe=Probe(40 * GFLOPS), rate=Rate(20 * GFLOPS))
    lower = Probe(20 * GFLOPS)  # a moment a neighbour took half of the cores from
    long_run = host_peak(
        torch, cache, run_s=flops.PROBE_ANYWAY_AFTER_S, probe=lower, rate=Rate(10 * GFLOPS)
    )
    assert (lower.calls, long_run["cpu.peak_flops"]) == (1, 20 * GFLOPS)  # its own share
    kept = cache.fresh(peak_key(torch))
    assert (kept["peak_flops"], kept["small_flops"]) == (40 * GFLOPS, 20 * GFLOPS)


def test_an_entry_past_its_age_is_probed_again(tmp_path: Path) -> None:
    clock = Clock()
    cache = PeakCache(str(tmp_path), clock=clock)
    host_peak(torch, cache, run_s=5.0, probe=Probe(40 * GFLOPS), rate=Rate(20 * GFLOPS))
    clock.now += flops.PEAK_CACHE_TTL_S
    again = Probe(35 * GFLOPS)
    facts = host_peak(torch, cache, run_s=5.0, probe=again, rate=Rate(20 * GFLOPS))
    assert (again.calls, facts["cpu.peak_flops"]) == (1, 35 * GFLOPS)
    assert cache.fresh(peak_key(torch))["peak_flops"] == 35 * GFLOPS


@pytest.mark.parametrize("content", ["not json", '{"entries": []}', '{"entries": {"k": 1}}'])
def test_a_broken_cache_file_is_probed_over(tmp_path: Path, content: str) -> None:
    (tmp_path / flops.PEAK_CACHE_FILE).write_text(content)
    probe = Probe(40 * GFLOPS)
    assert host_peak(torch, PeakCache(str(tmp_path)), run_s=5.0, probe=probe, rate=Rate(1e9))
    assert probe.calls == 1
    stored = json.loads((tmp_path / flops.PEAK_CACHE_FILE).read_text())["entries"]
    assert stored[peak_key(torch)]["peak_flops"] == 40 * GFLOPS


def test_an_unwritable_cache_never_fails_the_run(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache's folder would be
    cache = PeakCache(str(blocked / "cache"))
    facts = host_peak(torch, cache, run_s=5.0, probe=Probe(40 * GFLOPS), rate=Rate(1e9))
    assert facts["cpu.peak_flops"] == 40 * GFLOPS


def test_the_small_matmul_rate_is_a_rate() -> None:
    assert flops.matmul_rate(torch, 64, 3) > 1e6  # FLOP/s, not seconds


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
