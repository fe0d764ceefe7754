"""The analyses beyond HTA's four, on a small hand-made trace whose answers are known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfweb_recommender.analysis import gpu_time, host_device, steps
from perfweb_recommender.analysis.intervals import merge, overlap_length, sweep_by_mask
from perfweb_recommender.trace.loader import load_trace
from perfweb_recommender.trace.model import RankTrace


def _x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


EVENTS = [
    # two steps of 100 µs each
    _x("user_annotation", "ProfilerStep#1", 1000, 100),
    _x("user_annotation", "ProfilerStep#2", 1100, 100),
    # step 1: DataLoader 0-20, CPU op 20-40, launch 40-45, sync 60-90
    _x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1000, 20),
    _x("cpu_op", "aten::mm", 1020, 20),
    _x("cuda_runtime", "cudaLaunchKernel", 1040, 5, correlation=1),
    _x("cuda_runtime", "cudaMemcpyAsync", 1045, 5, correlation=2),
    _x("cuda_runtime", "cudaDeviceSynchronize", 1060, 30),
    # GPU: an fp32 GEMM 45-65, a pageable H2D copy 70-80 (1 MB), a tensor-core GEMM in step 2
    _x("kernel", "volta_sgemm_128x64_nn", 1045, 20, stream=7, correlation=1),
    _x(
        "gpu_memcpy",
        "Memcpy HtoD (Pageable -> Device)",
        1070,
        10,
        stream=7,
        correlation=2,
        bytes=1_000_000,
    ),
    _x("cuda_runtime", "cudaLaunchKernel", 1100, 5, correlation=3),
    _x("kernel", "sm80_xmma_gemm_f16f16_tn", 1105, 5, stream=7, correlation=3),
    _x("cuda_runtime", "cudaLaunchKernel", 1110, 5, correlation=4),
    _x("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 1108, 40, stream=20, correlation=4),
    _x("cpu_op", "aten::item", 1150, 2),
    _x("cpu_op", "aten::_local_scalar_dense", 1150, 2),
]


@pytest.fixture
def trace(tmp_path: Path) -> RankTrace:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))
    return load_trace(path)


def test_intervals_merge_touching_spans_and_measure_overlap() -> None:
    starts, ends = merge(np.array([0.0, 5.0, 10.0, 30.0]), np.array([5.0, 8.0, 20.0, 31.0]))
    assert list(starts) == [0.0, 10.0, 30.0] and list(ends) == [8.0, 20.0, 31.0]
    a = (np.array([0.0]), np.array([10.0]))
    b = (np.array([5.0]), np.array([20.0]))
    assert overlap_length(a, b) == 5.0
    assert list(sweep_by_mask([a, b])) == [0.0, 5.0, 10.0, 5.0]


def test_each_step_is_split_into_categories_that_sum_to_its_duration(trace: RankTrace) -> None:
    rows = steps.step_breakdown(trace)
    assert [r["step"] for r in rows] == [1, 2]
    first = rows[0]
    assert first["dataloader_us"] == 20 and first["cpu_exec_us"] == 20
    assert first["kernel_us"] == 20  # 45-65
    assert first["memcpy_us"] == 10  # 70-80
    # launch 40-45, and the sync 60-90 where no GPU work runs (65-70, 80-90)
    assert first["runtime_us"] == 5 + 5 + 10
    parts = [first[f"{c}_us"] for c in (*steps.CATEGORIES, "other")]
    assert sum(parts) == pytest.approx(first["duration_us"])


def test_memcpy_kinds_and_bandwidth(trace: RankTrace) -> None:
    stats = host_device.memcpy_stats(trace)
    assert stats == {"HtoD pageable": {"count": 1, "bytes": 1_000_000, "us": 10.0, "gbps": 100.0}}


def test_sync_points_count_item_once(trace: RankTrace) -> None:
    sync = host_device.sync_points(trace)
    assert sync["cudaDeviceSynchronize"] == {"count": 1, "us": 30.0}
    assert sync["aten::_local_scalar_dense"]["count"] == 1 and "aten::item" not in sync


def test_launch_statistics(trace: RankTrace) -> None:
    launch = host_device.launch_stats(trace, gpu_time.launch_times(trace.gpu, trace))
    assert launch["kernels"] == 3 and launch["short_kernels"] == 1  # the 5 µs GEMM
    assert launch["median_launch_delay_us"] == 5.0  # 5, 5 and -2 µs: median 5


def test_tensor_core_share_of_dense_math(trace: RankTrace) -> None:
    tc = host_device.tensor_core_stats(trace)
    assert tc["dense_math_us"] == 25.0
    assert tc["tensor_core_share"] == pytest.approx(5 / 25)
    assert tc["fp32_simt_share"] == pytest.approx(20 / 25)


def test_kernel_breakdown_and_overlap_on_the_window(trace: RankTrace) -> None:
    # Two ProfilerSteps: HTA's window keeps only GPU work launched before step 2 began.
    window = gpu_time.analysis_window(trace)
    assert len(window) == 2
    whole = gpu_time.kernel_breakdown_us(trace.gpu)
    assert whole["COMPUTATION overlapping COMMUNICATION"] == 2.0  # 1108-1110
    assert gpu_time.comm_comp_overlap_pct(trace.gpu) == pytest.approx(100 * 2 / 40)


def test_idle_causes_per_stream(trace: RankTrace) -> None:
    idle = gpu_time.idle_breakdown(trace.gpu, trace)
    # stream 7: GEMM ends 65, copy starts 70 (launched 45: queued) -> kernel wait 5;
    # copy ends 80, next GEMM starts 105, launched at 100 > 80 -> host wait 25.
    assert idle["7"]["kernel_wait"]["us"] == 5.0
    assert idle["7"]["host_wait"]["us"] == 25.0
    assert idle["7"]["other"]["us"] == 0.0
