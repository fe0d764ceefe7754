"""Every workload of the GPU kit builds and trains a few steps on the CPU (CI has no GPU),
within its step and time bounds."""

from __future__ import annotations

import pytest
import torch

from bench.gpu import workloads
from bench.gpu.expectations import BY_WORKLOAD

FEW = workloads.Limits(min_steps=3, min_seconds=0.0, max_steps=3, max_seconds=30.0)


@pytest.mark.parametrize("name", sorted(set(workloads.WORKLOADS) - {"idle_held"}))
def test_it_runs_each_workload_a_few_steps_on_the_cpu(name: str) -> None:
    result = workloads.run_workload(name, device="cpu", smoke=True, limits=FEW)
    assert result["workload"] == name
    assert result["steps"] == 3
    assert len(result["step_s"]) == 3 and all(t > 0 for t in result["step_s"])
    assert result["wall_s"] >= sum(result["step_s"]) * 0.99


@pytest.mark.parametrize("name", sorted(set(workloads.WORKLOADS) - {"item_sync"}))
def test_its_gpu_sized_shapes_fit_together_on_the_meta_device(name: str) -> None:
    # The sizes a real GPU run uses, checked without the compute: meta tensors carry shapes
    # only. item_sync is healthy_bf16's model plus `.item()`, which meta tensors refuse.
    step = workloads.WORKLOADS[name](
        workloads.Context(device="meta", smoke=False, idle_seconds=0.0, full_size=True)
    )
    step()
    step()


def test_it_holds_memory_idle_in_the_burst_s_last_step() -> None:
    result = workloads.run_workload("idle_held", device="cpu", smoke=True, idle_seconds=0.3)
    assert result["steps"] == workloads.BURST_STEPS + 5
    assert result["step_s"][workloads.BURST_STEPS - 1] >= 0.3
    assert max(result["step_s"][workloads.BURST_STEPS :]) < 0.3


def test_it_stops_at_its_time_bound_however_many_steps_are_asked() -> None:
    limits = workloads.Limits(min_steps=10**9, min_seconds=0.0, max_steps=10**9, max_seconds=0.5)
    result = workloads.run_workload("healthy_bf16", device="cpu", smoke=True, limits=limits)
    assert 0 < result["steps"] < 10**9
    assert result["wall_s"] < 5.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_it_refuses_cuda_where_torch_sees_no_gpu() -> None:
    with pytest.raises(RuntimeError, match="no CUDA device"):
        workloads.run_workload("healthy_bf16", device="cuda", limits=FEW)


def test_it_has_one_expectation_per_workload() -> None:
    assert set(BY_WORKLOAD) == set(workloads.WORKLOADS)


def test_it_leaves_the_cpu_loop_one_intra_op_thread() -> None:
    workloads.run_workload("healthy_bf16", device="cpu", smoke=True, limits=FEW)
    assert torch.get_num_threads() == 1
