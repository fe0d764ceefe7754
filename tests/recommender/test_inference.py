"""Inference runs: per-request latency percentiles over sliding windows, throughput in
requests/s and samples/s, peak memory — and `python -m perfweb_recommender analyze` reports them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfweb_contract.protocol import WindowName
from perfweb_recommender.evidence import StepSample
from perfweb_recommender.inference import MIN_WINDOW_S, profiled_steps, request_stats
from tests.agent.conftest import ROOT
from tests.recommender.offline_runs import inference_batch, write_agent


def _requests(latencies: list[float], *, t0: float = 0.0, rank: int = 0) -> list[StepSample]:
    out, t = [], t0
    for i, latency in enumerate(latencies):
        t += latency
        out.append(StepSample(rank=rank, index=i, t=t, duration_s=latency))
    return out


def test_it_computes_latency_percentiles_of_every_request() -> None:
    latencies = [0.010] * 90 + [0.050] * 9 + [0.500]  # one slow request in a hundred
    stats = request_stats(requests=_requests(latencies))
    assert stats is not None
    assert stats.requests == 100
    assert stats.latency_p50_s == pytest.approx(0.010)
    assert stats.latency_p95_s == pytest.approx(0.050)
    assert stats.latency_p99_s == pytest.approx(np.percentile(latencies, 99))
    assert 0.05 < stats.latency_p99_s < 0.5


def test_the_window_name_the_agent_writes_is_the_one_readers_parse() -> None:
    name = str(WindowName(rank=3, first=20, last=25))  # as runtime/profiler.py names it
    assert name == "rank3-step20-25"
    for form in (name, f"/d/traces/{name}.pt.trace.json.gz", f"{name}.pt.trace.json.gz"):
        assert WindowName.parse(form) == WindowName(3, 20, 25)
        assert WindowName.parse(form).steps == 5  # type: ignore[union-attr]
    for other in ("xrank1-step1-2", "rank1-step1-2.json", "trace.json", "rank1-step-2"):
        assert WindowName.parse(other) is None


def test_requests_inside_a_profiler_window_count_but_not_in_the_latencies() -> None:
    # Requests 20..25 ran under the agent's profiler window (its trace's name says so) and
    # paid for it: 100 ms instead of 10 ms. They are served requests, not the model's latency.
    latencies = [0.010] * 20 + [0.100] * 6 + [0.010] * 74
    names = ["/d/traces/rank0-step20-25.pt.trace.json.gz", "other.json", "xrank1-step1-2"]
    assert profiled_steps(names) == {0: [(20, 25)]}
    assert profiled_steps(["rank0-step20-25"]) == {0: [(20, 25)]}  # the server's trace name
    profiled = profiled_steps(names)
    stats = request_stats(requests=_requests(latencies), profiled=profiled)
    assert stats is not None and stats.requests == 100 and stats.profiled_requests == 6
    assert stats.latency_p99_s == pytest.approx(0.010)  # the window's requests left out
    assert max(stats.windows.p99_s) == pytest.approx(0.010)
    assert stats.throughput_rps == pytest.approx(100 / sum(latencies))  # all 100 served
    unmarked = request_stats(requests=_requests(latencies))
    assert unmarked is not None and unmarked.latency_p99_s == pytest.approx(0.100)
    other_rank = request_stats(requests=_requests(latencies, rank=1), profiled=profiled)
    assert other_rank is not None and other_rank.profiled_requests == 0
    only = request_stats(requests=_requests([0.1] * 3, t0=0.0)[:3], profiled={0: [(0, 5)]})
    assert only is not None and only.latency_p50_s == pytest.approx(0.1)  # nothing else left


def test_it_measures_throughput_in_requests_and_samples_per_second() -> None:
    requests = _requests([0.02] * 100)  # 100 requests back to back: 2.0 s
    sizes = [(r.t, 8.0) for r in requests]
    stats = request_stats(requests=requests, batch_sizes=sizes)
    assert stats is not None
    assert stats.span_s == pytest.approx(2.0)
    assert stats.throughput_rps == pytest.approx(50.0)
    assert stats.throughput_sps == pytest.approx(400.0)
    assert stats.samples == 800.0
    no_sizes = request_stats(requests=requests)
    assert no_sizes is not None and no_sizes.throughput_sps is None


def test_its_sliding_windows_follow_a_slowdown() -> None:
    latencies = [0.01] * 600 + [0.04] * 150  # 6 s fast, then 6 s four times slower
    stats = request_stats(requests=_requests(latencies), batch_sizes=[])
    assert stats is not None
    windows = stats.windows
    assert windows.window_s == pytest.approx(max(MIN_WINDOW_S, stats.span_s / 30))
    assert len(windows.t) >= 20 and windows.t == sorted(windows.t)
    assert windows.p50_s[0] == pytest.approx(0.01) and windows.p50_s[-1] == pytest.approx(0.04)
    assert windows.rps[0] == pytest.approx(100.0, rel=0.02)
    assert windows.rps[-1] == pytest.approx(25.0, rel=0.05)
    assert all(
        p50 <= p95 <= p99
        for p50, p95, p99 in zip(windows.p50_s, windows.p95_s, windows.p99_s, strict=True)
    )
    assert sum(windows.requests) > stats.requests  # half-overlapping windows


def test_it_has_nothing_to_say_without_requests() -> None:
    assert request_stats(requests=[]) is None


def test_several_ranks_serve_one_throughput() -> None:
    both = _requests([0.1] * 10, rank=0) + _requests([0.1] * 10, rank=1)
    stats = request_stats(requests=both)
    assert stats is not None
    assert (stats.requests, stats.ranks) == (20, 2)
    assert stats.throughput_rps == pytest.approx(20.0)


def _analyze(path: Path, *fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfweb_recommender", "analyze", str(path), *fmt],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_the_cli_reports_an_inference_run_in_json_and_text(tmp_path: Path) -> None:
    latencies = [0.020] * 95 + [0.080] * 5
    batch = inference_batch(latencies, batch_size=16, gap_s=0.005)
    root = write_agent(tmp_path / "offline", start={"facts": {}}, batches=[batch])
    result = _analyze(root, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    run = report["run"]
    span = sum(latencies) + 0.005 * 99
    assert run["kind"] == "inference" and run["steps_source"] == "module"
    assert run["requests"] == 100
    assert run["latency_p50_s"] == pytest.approx(0.020)
    assert run["latency_p95_s"] == pytest.approx(np.percentile(latencies, 95))
    assert run["latency_p99_s"] == pytest.approx(0.080)
    assert run["throughput_rps"] == pytest.approx(100 / span)
    assert run["throughput_sps"] == pytest.approx(1600 / span)
    assert run["peak_rss_bytes"] == 7.5e8
    assert report["coverage"]["verdict"] == "observed"
    assert report["coverage"]["kind"] == "inference"
    text = _analyze(root).stdout
    assert "workload: inference, boundaries from calls of the outermost nn.Module" in text
    assert "100 requests timed by the agent on 1 rank(s): latency p50 20.0 ms" in text
    assert "p99 80.0 ms" in text
    assert f"throughput {100 / span:.2f} requests/s, {1600 / span:.1f} samples/s" in text
    assert "peak memory: RSS 715.3 MiB" in text
    assert "step" not in text.split("seen:")[1].split("\n")[0]  # "100 requests", not steps
