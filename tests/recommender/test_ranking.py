"""Ranking: expected time recovered x confidence, discounted by risk class; verified fixes
rank by their measured gain."""

from __future__ import annotations

from recommender.rules.base import RISK_WEIGHT, Finding, Fix, rank_findings


def _finding(rule_id: str, risk: str, gain: float, confidence: float = 0.8) -> Finding:
    return Finding(
        id=rule_id,
        title=rule_id,
        risk=risk,
        confidence=confidence,
        estimated_gain=gain,
        gain_basis="test",
        evidence=[],
        fix=Fix(text="x"),
    )


def test_it_ranks_by_expected_time_recovered_times_confidence() -> None:
    small = _finding("a", "data-path", 0.10, confidence=0.9)
    large = _finding("b", "data-path", 0.30, confidence=0.5)
    assert rank_findings([small, large]) == [large, small]


def test_it_puts_data_path_before_operator_before_distributed_before_model_at_equal_gain() -> None:
    order = ["model", "distributed", "operator", "data-path"]
    ranked = rank_findings([_finding(risk, risk, 0.2) for risk in order])
    assert [f.risk for f in ranked] == ["data-path", "operator", "distributed", "model"]


def test_a_model_finding_never_outranks_an_equally_large_data_path_finding() -> None:
    assert RISK_WEIGHT["model"] < RISK_WEIGHT["data-path"]
    model = _finding("m", "model", 0.4, confidence=1.0)
    data = _finding("d", "data-path", 0.4, confidence=1.0)
    assert rank_findings([model, data])[0] is data


def test_a_verified_fix_ranks_by_its_measured_gain() -> None:
    guessed = _finding("guess", "data-path", 0.5, confidence=0.9)
    verified = _finding("verified", "model", 0.05, confidence=0.2)
    verified.measured_gain = 0.6
    assert rank_findings([guessed, verified])[0] is verified
    verified.measured_gain = -0.1  # refuted: no gain, ranks last
    assert rank_findings([guessed, verified])[-1] is verified
