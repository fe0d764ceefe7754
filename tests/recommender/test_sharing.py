"""Findings claiming the same time share it; gains never add up past what the trace shows."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from perfweb_recommender.analysis.gpu_time import Temporal
from perfweb_recommender.evidence import RunEvidence, StepSample
from perfweb_recommender.rules import diagnose
from perfweb_recommender.rules.base import Evidence, Finding, Fix
from perfweb_recommender.rules.sharing import IDLE, available_time, share_overlapping_gains


def _found(rule_id: str, gain: float, basis: str = "measured") -> Finding:
    return Finding(rule_id, rule_id, "data-path", 0.7, gain, basis, [], Fix("x"))


def _owlv2_like(make_summary: Callable[..., object]) -> RunEvidence:
    """One trace whose GPU is idle 47% of the step (the owlv2 case of issue 18)."""
    trace = make_summary(temporal=Temporal(47_000.0, 53_000.0, 0.0, 100_000.0), steps=[])
    return RunEvidence(traces=[trace])  # type: ignore[list-item]


def test_it_shares_the_idle_time_among_the_findings_that_claim_it(make_summary) -> None:  # noqa: ANN001
    evidence = _owlv2_like(make_summary)
    findings = [
        _found("dataloader.num_workers", 0.46),
        _found("sync.host_device", 0.296),
        _found("attention.fused", 0.125),  # busy time: not shared with the idle ones
    ]
    assert available_time(evidence)[IDLE] == 0.47
    share_overlapping_gains(findings, evidence)
    loader, sync, attention = findings
    assert loader.estimated_gain + sync.estimated_gain <= 0.47 + 1e-9
    assert loader.estimated_gain / sync.estimated_gain == pytest.approx(0.46 / 0.296)
    assert attention.estimated_gain == 0.125
    assert "shares the trace's 47% GPU idle with sync.host_device" in loader.gain_basis


def test_gains_never_add_up_past_the_whole_step_without_a_trace() -> None:
    findings = [_found("a", 0.8), _found("b", 0.6)]
    share_overlapping_gains(findings, RunEvidence())
    assert sum(f.estimated_gain for f in findings) <= 1.0 + 1e-9


def test_a_verified_gain_is_left_as_measured(make_summary) -> None:  # noqa: ANN001
    verified = _found("dataloader.num_workers", 0.9)
    verified.measured_gain = 0.5
    other = _found("sync.host_device", 0.4)
    share_overlapping_gains([verified, other], _owlv2_like(make_summary))
    assert verified.estimated_gain == 0.9 and other.estimated_gain == 0.4


def test_the_diagnosis_of_a_run_never_claims_more_idle_time_than_it_has(make_summary) -> None:  # noqa: ANN001
    trace = make_summary(
        temporal=Temporal(47_000.0, 53_000.0, 0.0, 100_000.0),
        sync_points={"cudaDeviceSynchronize": {"count": 50, "us": 40_000.0}},
        idle_breakdown={"7": {"host_wait": {"us": 45_000.0}, "kernel_wait": {"us": 2_000.0}}},
    )
    steps = [StepSample(0, i, 1000.0 + i, 0.1, 0.045) for i in range(30)]
    evidence = RunEvidence(
        facts={"cuda.initialized": True, "dataloader.0.num_workers": 0},
        steps=steps,
        traces=[trace],  # type: ignore[list-item]
    )
    findings = diagnose(evidence)
    idle_claims = [f for f in findings if f.id in ("dataloader.num_workers", "sync.host_device")]
    assert len(idle_claims) == 2
    assert sum(f.estimated_gain for f in idle_claims) <= available_time(evidence)[IDLE] + 1e-9


def test_evidence_is_untouched_by_sharing() -> None:
    found = _found("sync.host_device", 0.9)
    found.evidence.append(Evidence("x", 1.0, "", "trace"))
    share_overlapping_gains([found], RunEvidence())
    assert found.evidence == [Evidence("x", 1.0, "", "trace")]
