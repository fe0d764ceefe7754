"""Shared fixtures for the recommender tests: where the peer traces and HTA's results live."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]


def peer_traces_dir() -> Path | None:
    """../shared/peer-traces next to the checkout (or $PERFWEB_PEER_TRACES)."""
    candidates = [os.environ.get("PERFWEB_PEER_TRACES", "")]
    candidates += [
        str(_REPO.parent / "shared" / "peer-traces"),
        str(_REPO / "shared" / "peer-traces"),
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "hta").is_dir():
            return Path(candidate)
    return None


PEER = peer_traces_dir()
needs_peer_traces = pytest.mark.skipif(PEER is None, reason="shared/peer-traces not available")


def hta_runs() -> list[dict]:
    """HTA 0.5.0's recorded results, one entry per trace directory."""
    if PEER is None:
        return []
    runs: list[dict] = []
    for name in ("trace_filter.json", "other_traces.json"):
        runs += json.loads((PEER / "hta-0.5.0-results" / name).read_text())["runs"]
    return runs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `hta_run` with every trace directory HTA has results for."""
    if "hta_run" in metafunc.fixturenames:
        runs = hta_runs()
        metafunc.parametrize("hta_run", runs, ids=[r["trace_dir"] for r in runs])


@pytest.fixture
def peer() -> Path:
    """The peer-traces directory (tests using it are skipped when it is absent)."""
    if PEER is None:
        pytest.skip("shared/peer-traces not available")
    return PEER


def _summary(**overrides: object) -> object:
    """A TraceSummary of a healthy single-GPU step, with fields overridden."""
    from perfweb_recommender.analysis.gpu_time import Temporal
    from perfweb_recommender.analysis.summary import TraceSummary

    steps = [
        {
            "step": i,
            "duration_us": 100_000.0,
            "kernel_us": 90_000.0,
            "memcpy_us": 0.0,
            "memset_us": 0.0,
            "runtime_us": 2_000.0,
            "dataloader_us": 0.0,
            "cpu_exec_us": 8_000.0,
            "other_us": 0.0,
        }
        for i in range(5)
    ]
    fields: dict[str, object] = {
        "rank": 0,
        "source": "synthetic",
        "temporal": Temporal(
            idle_us=5_000.0, compute_us=90_000.0, non_compute_us=5_000.0, kernel_span_us=100_000.0
        ),
        "comm_comp_overlap_pct": None,
        "idle_breakdown": {
            "7": {
                "host_wait": {"us": 1_000.0, "ratio": 0.2, "count": 5},
                "kernel_wait": {"us": 4_000.0, "ratio": 0.8, "count": 400},
                "other": {"us": 0.0, "ratio": 0.0, "count": 0},
            }
        },
        "kernel_breakdown": {"COMPUTATION": {"us": 90_000.0, "pct": 100.0}},
        "steps": steps,
        "step_shares": {"kernel": 0.9, "runtime": 0.02, "cpu_exec": 0.08, "dataloader": 0.0},
        "memcpy": {},
        "h2d": {"h2d_on_compute_stream_us": 0.0, "h2d_overlapped_us": 0.0, "h2d_total_us": 0.0},
        "sync_points": {},
        "allocator": {},
        "launch": {"kernels": 500, "short_kernels": 50, "short_kernel_share": 0.1},
        "tensor_cores": {
            "dense_math_share": 0.6,
            "tensor_core_share": 0.9,
            "fp32_simt_share": 0.0,
            "conv_share": 0.0,
            "softmax_bmm_share": 0.0,
        },
        "cpu_ops": {"ops_per_step": 100.0, "median_op_us": 50.0},
        "markers": {},
        "compute_capability": (8, 0),
    }
    fields.update(overrides)
    return TraceSummary(**fields)  # type: ignore[arg-type]


@pytest.fixture
def make_summary():  # noqa: ANN201 - returns the factory
    """Factory for synthetic TraceSummary objects (a healthy GPU step by default)."""
    return _summary


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - returns the factory
    """`recorded(name)`: tests.recommender.recorded_runs.SCRIPTS[name] attached offline once
    per session (each later call gets the same recording)."""
    from tests.recommender.recorded_runs import Recorded, record

    runs: dict[str, Recorded] = {}

    def get(name: str) -> Recorded:
        if name not in runs:
            runs[name] = record(name, tmp_path_factory.mktemp(name))
        return runs[name]

    return get
