"""Achieved FLOP/s and MFU (recommender/perfweb_recommender/compute.py): the peak of the run's
device and dtype, or the CPU peak the agent measured; absent, with the reason, when one is
unknown."""

from __future__ import annotations

import pytest

from perfweb_recommender.compute import PEAKS, gpu_model, utilisation
from perfweb_recommender.evidence import RunEvidence, StepSample


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-16GB", "V100 SXM"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("AMD Instinct MI300X", "MI300X"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GeForce GTX 1080", None),
    ],
)
def test_it_finds_the_peak_table_row_of_a_device_name(name: str, model: str | None) -> None:
    assert gpu_model(name) == model
    assert model is None or PEAKS[model]["fp32"] > 0


def steps(duration: float, n: int = 20) -> list[StepSample]:
    return [StepSample(0, i, 1000.0 + i, duration) for i in range(n)]


def test_it_divides_one_step_s_flops_by_the_step_and_the_gpu_s_bf16_peak() -> None:
    evidence = RunEvidence(
        facts={
            "flops.per_step": 4.9475e14,
            "cuda.initialized": True,
            "amp.autocast": True,
            "amp.autocast_dtype": "torch.bfloat16",
        },
        steps=steps(1.0),
        devices=[{"key": "gpu:0", "kind": "gpu", "name": "NVIDIA H100 80GB HBM3"}],
    )
    use = utilisation(evidence)
    assert use.dtype == "bf16" and use.peak_source == "H100 SXM bf16 (datasheet)"
    assert use.mfu == pytest.approx(0.5)


def test_it_uses_the_cpu_peak_measured_on_the_run_s_host() -> None:
    evidence = RunEvidence(
        facts={"flops.per_step": 2e9, "cpu.peak_flops": 1e10, "cpu.peak_threads": 2},
        steps=steps(0.4),
    )
    use = utilisation(evidence)
    assert use.mfu == pytest.approx(0.5)
    assert "2 threads" in use.peak_source and "MFU 50.0%: 5 GFLOP/s of 10 GFLOP/s" in use.text()


def test_a_cpu_peak_from_the_hosts_cache_says_when_it_was_probed_and_at_what_share() -> None:
    facts = {"flops.per_step": 2e9, "cpu.peak_flops": 1e10, "cpu.peak_threads": 2}
    facts |= {"cpu.peak_probed_at": 1_764_806_400.0, "cpu.peak_share": 0.75}  # 2025-12-04
    use = utilisation(RunEvidence(facts=facts, steps=steps(0.4)))
    assert use.mfu == pytest.approx(0.5)
    assert use.peak_source == (
        "measured on the run's host: fp32 matmul, 2 threads (probed 2025-12-04 00:00 UTC, "
        "at 75% of it for this run's share of the CPU)"
    )


def test_it_says_why_mfu_is_absent() -> None:
    no_count = utilisation(RunEvidence(steps=steps(0.1)))
    assert no_count.mfu is None and no_count.reason == "no step's FLOPs were counted"
    unknown = utilisation(
        RunEvidence(
            facts={"flops.per_step": 1e12, "cuda.initialized": True},
            steps=steps(0.1),
            devices=[{"key": "gpu:0", "kind": "gpu", "name": "NVIDIA GeForce GTX 1080"}],
        )
    )
    assert unknown.mfu is None and unknown.reason == "no peak known for NVIDIA GeForce GTX 1080"
    no_bf16 = utilisation(
        RunEvidence(
            facts={
                "flops.per_step": 1e12,
                "cuda.initialized": True,
                "amp.autocast": True,
                "amp.autocast_dtype": "torch.bfloat16",
            },
            steps=steps(0.1),
            devices=[{"key": "gpu:0", "kind": "gpu", "name": "Tesla V100-SXM2"}],
        )
    )
    assert no_bf16.reason == "V100 SXM has no bf16 peak in the table"
