"""Ranking: expected time recovered x confidence, discounted by risk class; verified fixes
rank by their measured gain."""

from __future__ import annotations

from perfweb_recommender.rules.base import RISK_WEIGHT, Finding, Fix, rank_findings


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


def _basis(found: Finding, basis: str) -> Finding:
    found.gain_basis = basis
    return found


def test_a_finding_that_ends_or_hangs_the_run_ranks_first_at_gain_zero() -> None:
    large = _finding("big", "data-path", 0.6, confidence=1.0)
    hang = _finding("hang", "distributed", 0.0)
    hang.critical = True
    assert rank_findings([large, hang])[0] is hang


def test_a_prior_never_outranks_a_measured_gain() -> None:
    measured = _basis(_finding("wait", "data-path", 0.19, confidence=0.7), "Amdahl on 19%")
    prior = _basis(_finding("dp", "distributed", 0.3, confidence=0.9), "prior: 30%")
    assert prior.prior and not measured.prior
    assert rank_findings([prior, measured]) == [measured, prior]
    assert prior.score > measured.score  # the tier, not the score, decides


def test_a_finding_without_a_gain_ranks_below_a_prior() -> None:
    nothing = _basis(_finding("zero", "data-path", 0.0), "no estimate")
    prior = _basis(_finding("dp", "distributed", 0.3), "prior: 30%")
    assert rank_findings([nothing, prior]) == [prior, nothing]
