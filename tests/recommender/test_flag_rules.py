"""Flag rules tell good from bad, and GPU-only fixes stay off CPU runs (synthetic evidence)."""

from __future__ import annotations

import pytest

from perfweb_recommender.evidence import RunEvidence, StepSample
from perfweb_recommender.rules import REGISTRY, diagnose


def _steps(wait: float = 0.0, duration: float = 0.1) -> list[StepSample]:
    return [StepSample(0, i, 1000.0 + i, duration, wait) for i in range(30)]


def test_dataparallel_on_a_cpu_run_claims_no_gain_and_ranks_below_a_measured_wait() -> None:
    evidence = RunEvidence(
        facts={"parallel.mode": "dataparallel", "dataloader.0.num_workers": 0},
        steps=_steps(wait=0.019, duration=0.1),  # 19% of each step waits on the DataLoader
    )
    findings = diagnose(evidence)
    ids = [f.id for f in findings]
    assert ids.index("dataloader.num_workers") < ids.index("distributed.dataparallel")
    dp = findings[ids.index("distributed.dataparallel")]
    assert dp.estimated_gain == 0.0 and "CPU" in dp.gain_basis


def test_dataparallel_on_gpus_keeps_its_prior_and_says_so() -> None:
    evidence = RunEvidence(facts={"parallel.mode": "dataparallel", "cuda.initialized": True})
    dp = REGISTRY["distributed.dataparallel"].func(evidence)
    assert dp is not None and dp.estimated_gain == 0.3 and dp.prior


def _ddp(**facts: object) -> RunEvidence:
    return RunEvidence(facts={"ddp.find_unused_parameters": True, **facts})


def test_find_unused_parameters_fires_only_when_every_parameter_got_a_gradient() -> None:
    rule = REGISTRY["distributed.find_unused_parameters"].func
    assert rule(_ddp(**{"ddp.unused_parameters": 0, "ddp.unused_checked_steps": 3})) is not None
    # unused parameters exist: the flag is needed (turning it off crashes DDP)
    assert rule(_ddp(**{"ddp.unused_parameters": 2, "ddp.unused_checked_steps": 3})) is None
    # never checked (an older agent): no advice that could crash the run
    assert rule(_ddp()) is None


def test_rank_device_mismatch_reads_the_training_threads_device() -> None:
    rule = REGISTRY["distributed.rank_device_mismatch"].func
    # the agent thread's cuda:0 on rank 1 is no evidence; the training thread's device is
    agent_thread_only = RunEvidence(facts={"env.local_rank": "1", "cuda.current_device": 0})
    assert rule(agent_thread_only) is None
    right = RunEvidence(facts={"env.local_rank": "1", "cuda.training_device": 1})
    assert rule(right) is None
    wrong = RunEvidence(facts={"env.local_rank": "0", "cuda.training_device": 1})
    assert rule(wrong) is not None


def test_fp16_autocast_with_a_disabled_grad_scaler_is_scaler_misuse() -> None:
    rule = REGISTRY["precision.scaler_misuse"].func
    facts = {
        "amp.autocast_dtype": "torch.float16",
        "training.backward": True,
        "amp.grad_scaler": True,
    }
    disabled = rule(RunEvidence(facts={**facts, "amp.grad_scaler_enabled": False}))
    assert disabled is not None and disabled.critical
    assert rule(RunEvidence(facts={**facts, "amp.grad_scaler_enabled": True})) is None


def test_a_loopback_rendezvous_in_a_multi_node_world_ranks_first() -> None:
    evidence = RunEvidence(
        facts={
            "distributed.world_size": 16,
            "env.local_world_size": "8",
            "env.master_addr": "127.0.0.1",
            "dataloader.0.num_workers": 0,
        },
        steps=_steps(wait=0.05),
    )
    findings = diagnose(evidence)
    assert findings[0].id == "distributed.loopback_init" and findings[0].critical


def test_cpu_dispatch_overhead_gets_cpu_fixes_not_cuda_graphs() -> None:
    evidence = RunEvidence(
        facts={"dataloader.0.batch_size": 1, "dataloader.0.num_workers": 0},
        steps=_steps(duration=0.005),
    )
    found = REGISTRY["launch.overhead"].func(evidence)
    assert found is not None
    assert found.fix.knob == "compile=default"
    assert "reduce-overhead" not in found.fix.snippet
    assert "larger batch" in found.fix.text


def test_gpu_launch_overhead_keeps_cuda_graphs() -> None:
    evidence = RunEvidence(
        facts={"dataloader.0.batch_size": 1, "cuda.initialized": True},
        steps=_steps(duration=0.005),
    )
    found = REGISTRY["launch.overhead"].func(evidence)
    assert found is not None and found.fix.knob == "compile=reduce-overhead"


def test_a_wrong_backend_measures_its_gain_from_the_trace(make_summary) -> None:  # noqa: ANN001
    trace = make_summary(
        collectives={"AllReduce": {"count": 40, "us": 30_000.0, "exposed_us": 24_000.0}}
    )
    evidence = RunEvidence(
        facts={"distributed.backend": "gloo", "cuda.initialized": True}, traces=[trace]
    )
    found = REGISTRY["distributed.backend"].func(evidence)
    assert found is not None and not found.prior
    assert found.estimated_gain == pytest.approx(0.24 * (1 - 1 / 3))
    without = REGISTRY["distributed.backend"].func(
        RunEvidence(facts={"distributed.backend": "gloo", "cuda.initialized": True})
    )
    assert without is not None and without.prior


def test_compiled_inference_is_not_told_to_compile(make_summary) -> None:  # noqa: ANN001
    facts = {"training.backward": False, "cuda.initialized": True}
    eager = RunEvidence(facts=facts, steps=_steps(), traces=[make_summary()])
    assert REGISTRY["inference.compile_runtime"].func(eager) is not None
    compiled = RunEvidence(
        facts=facts, steps=_steps(), traces=[make_summary(compile={"compiled_regions": 4})]
    )
    assert REGISTRY["inference.compile_runtime"].func(compiled) is None


def _dispatch_bound(make_summary, *, exit_code: int | None, steps: int) -> RunEvidence:  # noqa: ANN001
    """A CPU trace of 1,000 tiny operators per 10 ms step, and `steps` steps of 10 ms."""
    trace = make_summary(
        launch={"kernels": 0},
        cpu_ops={"ops_per_step": 1000.0, "median_op_us": 3.0},
    )
    return RunEvidence(traces=[trace], steps=_steps(duration=0.01)[:1] * steps, exit_code=exit_code)


def test_tiny_cpu_operators_get_a_prior_gain_and_torch_compile(make_summary) -> None:  # noqa: ANN001
    found = REGISTRY["launch.overhead"].func(
        _dispatch_bound(make_summary, exit_code=None, steps=40)
    )
    assert found is not None and found.fix.knob == "compile=default"
    assert found.prior and found.gain_basis.startswith("prior: 5 µs"), found.gain_basis
    long_run = _dispatch_bound(make_summary, exit_code=0, steps=10_000)  # 100 s of steps
    assert REGISTRY["launch.overhead"].func(long_run).fix.knob == "compile=default"


def test_a_run_too_short_to_pay_back_torch_compile_is_not_told_to_compile(make_summary) -> None:  # noqa: ANN001
    # nanoGPT's shape (docs/public_scripts.md): 40 steps, then the run ended
    found = REGISTRY["launch.overhead"].func(_dispatch_bound(make_summary, exit_code=0, steps=40))
    assert found is not None and found.estimated_gain == 0.0 and found.fix.knob is None
    assert found.title.startswith("Checked:") and "would not pay back" in found.title
    assert "Not recommended" in found.fix.text
