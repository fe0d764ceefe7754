"""Every rule fires on its signal and stays quiet without it; the registry matches FIXES.md."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from perfweb_recommender.analysis.gpu_time import Temporal
from perfweb_recommender.evidence import RunEvidence, Series, StepSample
from perfweb_recommender.rules import REGISTRY, UNSUPPORTED, diagnose

Builder = Callable[[Callable[..., object]], RunEvidence]
GPU = {"cuda.initialized": True, "cuda.capability": "8.0"}


def _steps(
    n: int = 30, duration: float = 0.1, wait: float = 0.0, rank: int = 0
) -> list[StepSample]:
    return [StepSample(rank, i, 1000.0 + i * duration, duration, wait) for i in range(n)]


def _series(name: str, values: list[float], device: str = "gpu:0", dt: float = 1.0) -> Series:
    return Series(device, name, [1000.0 + i * dt for i in range(len(values))], values)


def _loader(**facts: object) -> dict[str, object]:
    base = {"num_workers": 0, "pin_memory": True, "persistent_workers": False, "batch_size": 32}
    base.update(facts)
    return {f"dataloader.0.{k}": v for k, v in base.items()}


def _healthy(make: Callable[..., object]) -> RunEvidence:
    return RunEvidence(
        facts={
            **GPU,
            **_loader(num_workers=4, persistent_workers=True),
            "threads.intra_op": 4,
            "host.usable_cores": 16,
            "cudnn.benchmark": True,
            "amp.autocast": True,
            "torch.float32_matmul_precision": "high",
            "training.backward": True,
        },
        steps=_steps(),
        traces=[make()],  # type: ignore[list-item]
        devices=[{"key": "gpu:0", "kind": "gpu", "memory_total": 80e9}],
        series=[
            _series("gpu.utilization", [95.0] * 120),
            _series("torch.cuda_peak", [40e9] * 10),
            _series("gpu.throttle_reasons", [0.0] * 20),
        ],
    )


def _with(builder: Builder, **changes: object) -> Builder:
    def build(make: Callable[..., object]) -> RunEvidence:
        evidence = builder(make)
        for key, value in changes.items():
            if key == "facts":
                evidence.facts.update(value)  # type: ignore[arg-type]
            else:
                setattr(evidence, key, value)
        return evidence

    return build


def _phased(per_step: list[dict[str, float]]) -> dict[str, object]:
    """`steps` and their `step.phase.<name>` series (the step anatomy) for `_with`."""
    steps, columns = [], {}
    for i, phases in enumerate(per_step):
        steps.append(StepSample(0, i, 1000.0 + i, sum(phases.values()), phases.get("data", 0.0)))
        for name, seconds in phases.items():
            columns.setdefault(name, []).append(seconds)
    series = [_series(f"step.phase.{name}", v, device="rank:0") for name, v in columns.items()]
    return {"steps": steps, "series": series}


PHASES = {"data": 0.01, "forward": 0.03, "backward": 0.04, "optimizer": 0.01, "other": 0.01}


def _trace(**overrides: object) -> Builder:
    return lambda make: _with(_healthy, traces=[make(**overrides)])(make)


LARGE_QUANTISED_MODEL = {
    "workload.kind": "inference",
    "model.parameters": 6_000_000,
    "model.linear_param_share": 0.99,
    "model.quantized": True,
}
POSITIVE: dict[str, Builder] = {
    "dataloader.num_workers": _with(
        _healthy, steps=_steps(wait=0.05), facts=_loader(num_workers=0)
    ),
    "dataloader.pin_memory": _trace(
        memcpy={"HtoD pageable": {"count": 50, "bytes": 5e8, "us": 10_000.0}}
    ),
    "dataloader.persistent_workers": _with(
        _healthy,
        steps=[
            StepSample(
                0,
                i,
                float(i),
                0.1 + (0.5 if i % 10 == 0 else 0),
                0.001 + (0.5 if i % 10 == 0 else 0),
            )
            for i in range(40)
        ],
        facts=_loader(num_workers=4, persistent_workers=False),
    ),
    "copy.synchronous_h2d": _trace(
        h2d={"h2d_on_compute_stream_us": 20_000.0, "h2d_overlapped_us": 0.0}
    ),
    "sync.host_device": _trace(sync_points={"cudaDeviceSynchronize": {"count": 10, "us": 3_000.0}}),
    "memory.empty_cache_in_loop": _with(_healthy, facts={"cuda.empty_cache_per_step": 1.0}),
    "memory.fragmentation": _with(
        _trace(allocator={"cudaMalloc": {"count": 20, "us": 4_000.0}}),
        series=[
            _series("torch.cuda_reserved", [30e9] * 5),
            _series("torch.cuda_allocated", [10e9] * 5),
        ],
    ),
    "cpu.thread_oversubscription": _with(
        _healthy, facts={"threads.intra_op": 16, "host.usable_cores": 8}
    ),
    "cpu.bound": _with(
        _healthy,
        facts={"host.usable_cores": 2, "threads.intra_op": 2},
        series=[
            _series("process.cpu_percent", [198.0] * 10, device="process"),
            _series("gpu.utilization", [20.0] * 10),
        ],
    ),
    "launch.overhead": _trace(
        launch={"kernels": 5000, "short_kernel_share": 0.8},
        temporal=Temporal(60_000.0, 30_000.0, 10_000.0, 100_000.0),
        idle_breakdown={
            "7": {
                "host_wait": {"us": 55_000.0},
                "kernel_wait": {"us": 5_000.0},
                "other": {"us": 0.0},
            }
        },
    ),
    "precision.amp": _with(
        _trace(
            tensor_cores={"dense_math_share": 0.6, "tensor_core_share": 0.0, "fp32_simt_share": 0.9}
        ),
        facts={"amp.autocast": False},
    ),
    "precision.tf32": _with(
        _healthy,
        facts={"torch.float32_matmul_precision": "highest", "cuda.matmul.allow_tf32": False},
    ),
    "precision.scaler_misuse": _with(_healthy, facts={"amp.scaler_step_without_update": True}),
    "cudnn.benchmark": _with(
        _trace(tensor_cores={"conv_share": 0.6}), facts={"cudnn.benchmark": False}
    ),
    "attention.fused": _trace(
        markers={"aten::bmm": 40, "aten::softmax": 20}, tensor_cores={"softmax_bmm_share": 0.4}
    ),
    "fusion.elementwise": _trace(
        tensor_cores={"elementwise_share": 0.5, "normalisation_share": 0.1, "concat_share": 0.06}
    ),
    "batch.increase": _with(
        _healthy,
        series=[_series("gpu.utilization", [20.0] * 30), _series("torch.cuda_peak", [8e9] * 5)],
    ),
    "memory.oom_risk": _with(_healthy, series=[_series("torch.cuda_peak", [78e9] * 5)]),
    "distributed.dataparallel": _with(_healthy, facts={"parallel.mode": "dataparallel"}),
    "distributed.backend": _with(_healthy, facts={"distributed.backend": "gloo"}),
    "distributed.rank_device_mismatch": _with(
        _healthy, facts={"env.local_rank": "1", "cuda.training_device": 0}
    ),
    "distributed.loopback_init": _with(
        _healthy,
        facts={
            "distributed.world_size": 16,
            "env.local_world_size": "8",
            "distributed.init_method": "tcp://127.0.0.1:29500",
        },
    ),
    "distributed.find_unused_parameters": _with(
        _healthy,
        facts={
            "ddp.find_unused_parameters": True,
            "ddp.unused_parameters": 0,
            "ddp.unused_checked_steps": 3,
        },
    ),
    "distributed.grad_accumulation": _trace(
        training=True,
        collectives={"AllReduce": {"count": 400, "us": 30_000.0, "exposed_us": 25_000.0}},
    ),
    "distributed.reduce_then_broadcast": _with(
        _healthy, facts={"distributed.reduce_then_broadcast_per_step": 1.0}
    ),
    "cpu.threads_too_few": lambda make: RunEvidence(
        facts={"threads.intra_op": 1, "host.usable_cores": 16, **_loader(num_workers=0)},
        steps=_steps(),
    ),
    "dataloader.too_many_workers": _with(
        _healthy, facts={**_loader(num_workers=12, persistent_workers=True), "host.usable_cores": 8}
    ),
    "distributed.comm_bound": _trace(
        comm_comp_overlap_pct=10.0,
        kernel_breakdown={
            "COMMUNICATION": {"us": 30_000.0, "pct": 40.0},
            "COMPUTATION": {"us": 45_000.0},
        },
    ),
    "distributed.straggler": _with(
        _healthy, steps=_steps(rank=0) + _steps(rank=1) + _steps(rank=2, duration=0.2)
    ),
    "gpu.low_utilization": _with(_healthy, series=[_series("gpu.utilization", [10.0] * 120)]),
    "gpu.idle_memory_held": _with(
        _healthy,
        series=[_series("gpu.utilization", [0.0] * 400), _series("gpu.memory_used", [20e9] * 10)],
    ),
    "gpu.throttling": _with(_healthy, series=[_series("gpu.throttle_reasons", [64.0] * 20)]),
    "inference.compile_runtime": _with(
        _healthy, facts={"training.backward": False, "amp.autocast": False}
    ),
    "inference.dynamic_batching": _with(
        _healthy,
        facts={"workload.kind": "inference"},  # _healthy's 30 steps run back to back
        series=[
            _series("gpu.utilization", [20.0] * 60),
            _series("step.batch_size", [1.0] * 30, device="rank:0"),
        ],
    ),
    "cpu.host_contention": _with(
        _healthy,
        facts={"host.cpu_count": 16},
        series=[
            _series("host.cpu_percent", [97.0] * 30, device="host"),
            _series("process.cpu_percent", [150.0] * 30, device="process"),
        ],
    ),
    "inference.autograd_enabled": _with(
        _healthy, facts={"workload.kind": "inference", "inference.grad_enabled": True}
    ),
    "inference.channels_last": _with(
        _healthy,
        facts={
            "workload.kind": "inference",
            "model.conv_param_share": 0.9,
            "model.channels_last": False,
        },
    ),
    "model.quantization": _with(
        _healthy,
        facts={
            "workload.kind": "inference",
            "model.linear_param_share": 0.95,
            "model.dtype": "float32",
        },
    ),
    "model.pruning": _with(
        _healthy,
        facts={**LARGE_QUANTISED_MODEL},  # _healthy's 30 steps run back to back
    ),
    "model.distillation": _with(_healthy, facts={**LARGE_QUANTISED_MODEL}),
    "training.accumulation_discarded": _with(
        _healthy,
        facts={
            "training.backward_per_step": 4.0,
            "training.zero_grad_discards_per_step": 1.0,
            "training.accumulation_checked_steps": 4,
        },
    ),
    "distributed.no_sync": _with(
        _trace(collectives={"AllReduce": {"count": 40, "us": 20_000.0, "exposed_us": 15_000.0}}),
        facts={
            "parallel.mode": "ddp",
            "training.backward_per_step": 4.0,
            "ddp.synced_backward_per_step": 4.0,
        },
    ),
    "dataloader.io_wait": _with(
        _healthy,
        steps=_steps(wait=0.05),
        facts={**_loader(num_workers=2), "host.usable_cores": 4, "host.cpu_count": 4},
        series=[
            _series("process.cpu_percent", [40.0] * 20, device="process"),
            _series("process.cpu_percent", [10.0] * 20, device="workers"),  # 5% per worker
            _series("process.count", [2.0] * 20, device="workers"),
            _series("process.runnable", [0.0] * 15 + [1.0] * 5, device="workers"),
            _series("host.cpu_percent", [20.0] * 20, device="host"),
        ],
    ),
    "dataloader.cpu_bound": _with(
        _healthy,
        steps=_steps(wait=0.05),
        facts={**_loader(num_workers=2), "host.usable_cores": 2, "host.cpu_count": 2},
        series=[
            _series("process.cpu_percent", [15.0] * 20, device="process"),
            _series("process.cpu_percent", [180.0] * 20, device="workers"),
            _series("process.count", [2.0] * 20, device="workers"),
            _series("process.runnable", [2.0] * 20, device="workers"),
            _series("host.cpu_percent", [98.0] * 20, device="host"),
        ],
    ),
    "inference.kv_cache": _with(
        _healthy,
        facts={
            "workload.kind": "inference",
            "inference.growing_context_calls": 96,
            "inference.context_length_mean": 40.0,
            "inference.context_length_max": 63,
            "inference.per_position_cost_s": 50e-6,  # 2 ms at 40 positions
            "inference.call_cost_at_zero_s": 1e-3,
        },
    ),
    "optimizer.foreach": _with(
        _healthy,
        **_phased([{**PHASES, "optimizer": 0.06}] * 30),
        facts={
            "optimizer.class": "Adam",
            "optimizer.foreach": False,
            "optimizer.param_tensors": 200,
            "optimizer.median_param_numel": 512,
        },
    ),
    "compute.low_mfu": _with(
        _healthy,
        facts={"flops.per_step": 1e12},  # 10 TFLOP/s at 0.1 s per step: 6% of an A100's TF32
        devices=[{"key": "gpu:0", "kind": "gpu", "name": "NVIDIA A100-SXM4-80GB"}],
    ),
    "run.phase_drift": _with(
        _healthy, **_phased([{**PHASES, "backward": 0.04 + 0.002 * i} for i in range(60)])
    ),
}


def test_every_fixes_id_has_a_rule_or_a_reason() -> None:
    fixes = Path(__file__).resolve().parents[3] / "shared" / "FIXES.md"
    if not fixes.is_file():
        pytest.skip("shared/FIXES.md not available")
    ids = set(re.findall(r"^\| `([a-z0-9_.]+)`", fixes.read_text(), re.M))
    assert ids == set(REGISTRY) | set(UNSUPPORTED)
    assert not set(REGISTRY) & set(UNSUPPORTED)


def test_every_registered_rule_has_a_positive_case() -> None:
    assert set(POSITIVE) == set(REGISTRY)


@pytest.mark.parametrize("rule_id", sorted(REGISTRY))
def test_rule_documents_what_why_and_fix(rule_id: str) -> None:
    doc = REGISTRY[rule_id].doc
    assert doc.startswith("What: ")
    assert "\n\nWhy: " in doc and "\n\nFix: " in doc


@pytest.mark.parametrize("rule_id", sorted(POSITIVE))
def test_rule_fires_on_its_signal(rule_id: str, make_summary: Callable[..., object]) -> None:
    found = REGISTRY[rule_id].func(POSITIVE[rule_id](make_summary))
    assert found is not None
    assert found.id == rule_id and found.risk == REGISTRY[rule_id].risk
    assert found.evidence and found.fix.text and found.gain_basis
    assert 0.0 <= found.estimated_gain <= 1.0 and 0.0 < found.confidence <= 1.0


@pytest.mark.parametrize("rule_id", sorted(REGISTRY))
def test_rule_stays_quiet_on_a_healthy_run(
    rule_id: str, make_summary: Callable[..., object]
) -> None:
    assert REGISTRY[rule_id].func(_healthy(make_summary)) is None


@pytest.mark.parametrize("rule_id", sorted(REGISTRY))
def test_rule_stays_quiet_without_any_evidence(rule_id: str) -> None:
    assert REGISTRY[rule_id].func(RunEvidence()) is None


def test_a_straggler_shows_in_rank_traces_too(make_summary: Callable[..., object]) -> None:
    slow = Temporal(5_000.0, 90_000.0 * 1.5, 5_000.0, 150_000.0)
    traces = [make_summary(rank=0), make_summary(rank=1), make_summary(rank=2, temporal=slow)]
    # type: ignore[arg-type]
    found = REGISTRY["distributed.straggler"].func(RunEvidence(traces=traces))
    assert found is not None and found.title.startswith("Rank 2 ")
    assert found.estimated_gain == pytest.approx(45_000.0 / 150_000.0)


def test_a_healthy_run_has_no_findings(make_summary: Callable[..., object]) -> None:
    assert diagnose(_healthy(make_summary)) == []


def test_cpu_bound_reads_every_ranks_process_in_a_distributed_run() -> None:
    """Ranks name their process `process:<rank>` (perfweb_contract.protocol.DeviceNaming)."""
    from perfweb_recommender.rules.cpu import cpu_bound

    def evidence(devices: list[str]) -> RunEvidence:
        return RunEvidence(
            facts={"host.usable_cores": 2, "threads.intra_op": 2},
            series=[_series("process.cpu_percent", [198.0] * 10, device=d) for d in devices]
            + [_series("gpu.utilization", [20.0] * 10)],
        )

    found = cpu_bound(evidence(["process:0", "process:1"]))
    assert found is not None and found.id == "cpu.bound"
    assert cpu_bound(evidence(["workers:0"])) is None  # worker children are not the loop


def test_host_device_sync_stays_quiet_on_a_cpu_only_trace(make_summary) -> None:  # noqa: ANN001
    """On the CPU, `.item()` (aten::_local_scalar_dense) blocks on no device: no finding."""
    from perfweb_recommender.rules.sync import sync_host_device

    syncs = {"aten::_local_scalar_dense": {"count": 40, "us": 0.0}}
    cpu_only = make_summary(sync_points=syncs, launch={"kernels": 0})
    assert sync_host_device(RunEvidence(traces=[cpu_only])) is None
    on_gpu = make_summary(sync_points=syncs)
    assert sync_host_device(RunEvidence(traces=[on_gpu])) is not None


CPU_ATTENTION = {"patterns": 2.0, "us": 30_000.0, "share": 0.3}


def test_attention_by_hand_shows_in_a_cpu_only_trace(make_summary) -> None:  # noqa: ANN001
    from perfweb_recommender.rules.attention import attention_fused

    cpu_trace = make_summary(launch={"kernels": 0}, cpu_attention=CPU_ATTENTION)
    found = attention_fused(RunEvidence(traces=[cpu_trace]))
    assert found is not None and "CPU step time" in found.title
    assert found.estimated_gain == pytest.approx(0.3 * (1 - 1 / 1.7), rel=1e-3)
    assert "measured share" in found.gain_basis and "prior" in found.gain_basis


def test_attention_on_the_cpu_needs_the_matmul_softmax_matmul_pattern(make_summary) -> None:  # noqa: ANN001
    from perfweb_recommender.rules.attention import attention_fused

    no_pattern = {**CPU_ATTENTION, "patterns": 0.0}  # bmm and a classifier's softmax, apart
    cpu_trace = make_summary(launch={"kernels": 0}, cpu_attention=no_pattern)
    assert attention_fused(RunEvidence(traces=[cpu_trace])) is None
    fused = make_summary(
        launch={"kernels": 0},
        cpu_attention=CPU_ATTENTION,
        markers={"aten::scaled_dot_product_attention": 4},
    )
    assert attention_fused(RunEvidence(traces=[fused])) is None


def test_pin_memory_without_a_gpu_is_informational() -> None:
    from perfweb_recommender.rules.dataloader import dataloader_pin_memory

    cpu_run = {**_loader(pin_memory=True), "nvml.available": False, "cuda.initialized": False}
    found = dataloader_pin_memory(RunEvidence(facts=cpu_run, steps=_steps()))
    assert found is not None and found.estimated_gain == 0.0 and found.score == 0.0
    assert found.fix.knobs == {} and "informational" in found.gain_basis
    unpinned = {**cpu_run, **_loader(pin_memory=False)}
    assert dataloader_pin_memory(RunEvidence(facts=unpinned, steps=_steps())) is None


def test_a_precise_loader_cause_replaces_the_generic_workers_finding(make_summary) -> None:  # noqa: ANN001
    found = [f.id for f in diagnose(POSITIVE["dataloader.io_wait"](make_summary))]
    assert "dataloader.io_wait" in found and "dataloader.num_workers" not in found
    found = [f.id for f in diagnose(POSITIVE["dataloader.cpu_bound"](make_summary))]
    assert "dataloader.cpu_bound" in found and "dataloader.num_workers" not in found


def test_io_wait_proposes_more_workers_than_cores(make_summary) -> None:  # noqa: ANN001
    found = REGISTRY["dataloader.io_wait"].func(POSITIVE["dataloader.io_wait"](make_summary))
    assert found is not None and int(found.fix.knobs["num_workers"]) > 4  # 4 usable cores


def test_a_computing_loader_is_not_waiting_on_io(make_summary) -> None:  # noqa: ANN001
    cpu_bound = POSITIVE["dataloader.cpu_bound"](make_summary)
    assert REGISTRY["dataloader.io_wait"].func(cpu_bound) is None
    io_wait = POSITIVE["dataloader.io_wait"](make_summary)
    assert REGISTRY["dataloader.cpu_bound"].func(io_wait) is None


def test_discarded_accumulation_is_critical(make_summary) -> None:  # noqa: ANN001
    evidence = POSITIVE["training.accumulation_discarded"](make_summary)
    found = diagnose(evidence)
    assert found[0].id == "training.accumulation_discarded" and found[0].critical
    one_backward = {"training.backward_per_step": 1.0}
    assert (
        REGISTRY["training.accumulation_discarded"].func(
            _with(POSITIVE["training.accumulation_discarded"], facts=one_backward)(make_summary)
        )
        is None
    )


def test_no_sync_needs_more_than_one_all_reduce_per_step(make_summary) -> None:  # noqa: ANN001
    found = REGISTRY["distributed.no_sync"].func(POSITIVE["distributed.no_sync"](make_summary))
    assert found is not None and found.estimated_gain > 0 and "measured" in found.gain_basis
    synced_once = _with(
        POSITIVE["distributed.no_sync"], facts={"ddp.synced_backward_per_step": 1.0}
    )
    assert REGISTRY["distributed.no_sync"].func(synced_once(make_summary)) is None


def test_kv_cache_gain_is_the_fitted_cost_of_one_position(make_summary) -> None:  # noqa: ANN001
    found = REGISTRY["inference.kv_cache"].func(POSITIVE["inference.kv_cache"](make_summary))
    assert found is not None
    now, cached = 1e-3 + 50e-6 * 40, 1e-3 + 50e-6
    assert found.estimated_gain == pytest.approx(1 - cached / now)
    flat = _with(POSITIVE["inference.kv_cache"], facts={"inference.per_position_cost_s": 1e-7})
    assert REGISTRY["inference.kv_cache"].func(flat(make_summary)) is None


def test_kv_cache_in_a_training_runs_evaluation_gains_its_share_of_the_steps(make_summary) -> None:  # noqa: ANN001, E501
    """A trainer's callback that samples between steps (minGPT's adder): the cache saves
    96 x 1.95 ms of decoding, a share of the run's 100 s of steps, not 1 - cached/now."""
    steps = [StepSample(0, i, 1000.0 + i, 1.0, 0.0) for i in range(100)]
    training = _with(
        POSITIVE["inference.kv_cache"], facts={"workload.kind": "training"}, steps=steps
    )
    found = REGISTRY["inference.kv_cache"].func(training(make_summary))
    assert found is not None
    now, cached = 1e-3 + 50e-6 * 40, 1e-3 + 50e-6
    assert found.estimated_gain == pytest.approx(96 * (now - cached) / 100.0)
    assert "in a training run" in found.gain_basis


def test_on_a_busy_host_a_runnable_worker_is_starved_not_waiting_on_io(make_summary) -> None:  # noqa: ANN001
    """A worker that gets 5% of a core on a saturated host but is runnable all along waits
    for a core: the loader is CPU-bound, and more workers cannot help."""
    starved = _with(
        POSITIVE["dataloader.io_wait"],
        series=[
            _series("process.cpu_percent", [10.0] * 20, device="workers"),
            _series("process.count", [2.0] * 20, device="workers"),
            _series("process.runnable", [2.0] * 20, device="workers"),
            _series("host.cpu_percent", [100.0] * 20, device="host"),
        ],
        steps=_steps(wait=0.08),
    )(make_summary)
    assert REGISTRY["dataloader.io_wait"].func(starved) is None
    assert REGISTRY["dataloader.cpu_bound"].func(starved) is not None


def test_without_state_samples_the_cpu_share_decides_on_a_quiet_host_only(make_summary) -> None:  # noqa: ANN001
    def without_state(evidence: RunEvidence) -> RunEvidence:
        evidence.series = [s for s in evidence.series if s.name != "process.runnable"]
        return evidence

    quiet = without_state(POSITIVE["dataloader.io_wait"](make_summary))
    assert REGISTRY["dataloader.io_wait"].func(quiet) is not None
    busy = without_state(POSITIVE["dataloader.io_wait"](make_summary))
    busy.series = [s for s in busy.series if s.name != "host.cpu_percent"]
    busy.series.append(_series("host.cpu_percent", [100.0] * 20, device="host"))
    assert REGISTRY["dataloader.io_wait"].func(busy) is None
