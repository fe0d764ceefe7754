"""The inference side of an A/B's statistics: arm metrics, output agreement, the results check
and the before/after table (perfweb_contract.ab, shared by `perf-agent ab` and the job page)."""

from __future__ import annotations

import json
import random

import pytest

from perfweb_contract.ab.decision import compare, paired_round, round_from_arms
from perfweb_contract.ab.presentation import before_after_rows
from perfweb_contract.ab.results import (
    INFERENCE,
    TRAINING,
    UNKNOWN_KIND,
    Comparison,
    LossParity,
    OutputAgreement,
    Round,
    arm_metrics,
    combined_kind,
    final_verdict,
    output_agreement,
)
from perfweb_contract.verdicts import (
    CHANGES_RESULTS,
    FASTER,
    INCONCLUSIVE,
    SLOWER,
    VERDICT_LABELS,
    VERDICTS,
)

SAME = {
    "samples": 20,
    "top1_agreement": 1.0,
    "max_abs_diff": 0.0,
    "mean_abs_diff": 0.0,
    "max_rel_diff": 0.0,
}
CLOSE = {
    "samples": 20,
    "top1_agreement": 1.0,
    "max_abs_diff": 1e-4,
    "mean_abs_diff": 2e-5,
    "max_rel_diff": 1e-3,
}
LOSSY = {
    "samples": 20,
    "top1_agreement": 0.9,
    "max_abs_diff": 0.4,
    "mean_abs_diff": 0.1,
    "max_rel_diff": 0.08,
}


def _inference_rounds(outputs: dict | None, *, n: int = 4, speedup: float = 2.0) -> list[Round]:
    rng = random.Random(3)
    rounds = []
    for _ in range(n):
        base = [0.010 * rng.uniform(0.98, 1.02) for _ in range(20)]
        cand = [0.010 / speedup * rng.uniform(0.98, 1.02) for _ in range(20)]
        rounds.append(
            paired_round(
                baseline_step_s=base,
                candidate_step_s=cand,
                kind=INFERENCE,
                baseline_batch_sizes=[16] * 20,
                candidate_batch_sizes=[16] * 20,
                baseline_peak_rss_bytes=300 << 20,
                candidate_peak_rss_bytes=280 << 20,
                outputs=outputs,
            )
        )
    return rounds


def test_arm_metrics_give_latency_percentiles_throughput_and_peaks() -> None:
    steps = [[0.01] * 98 + [0.02, 0.1], [0.01] * 100]
    metrics = arm_metrics(steps, [[4] * 100, [4] * 100], [100, 250], [None, None])
    assert metrics.latency_p50_s == pytest.approx(0.01)
    assert 0.01 < metrics.latency_p99_s <= 0.1  # the tail shows at p99, not at p50
    total = 0.01 * 198 + 0.12
    assert metrics.throughput_rps == pytest.approx(200 / total)
    assert metrics.throughput_sps == pytest.approx(800 / total)
    assert metrics.step_time_s == pytest.approx(0.01) and metrics.steps == 200
    assert metrics.peak_rss_bytes == 250 and metrics.cuda_max_allocated_bytes is None


def test_samples_per_second_needs_every_steps_batch_size() -> None:
    partial = arm_metrics([[0.1] * 5, [0.1] * 5], [[2] * 5, [2] * 4], [None, None], [1, 2])
    assert partial.throughput_sps is None and partial.throughput_rps == pytest.approx(10.0)
    assert partial.cuda_max_allocated_bytes == 2 and partial.peak_rss_bytes is None
    assert arm_metrics([[0.1] * 5], [None], [None], [None]).throughput_sps is None


def test_the_worst_round_decides_the_agreement() -> None:
    result = output_agreement([SAME, LOSSY, CLOSE])
    assert result.visible and result.samples == 60 and result.within_tolerance is False
    assert result.top1_agreement == 0.9 and result.max_rel_diff == 0.08
    assert result.max_abs_diff == 0.4 and result.mean_abs_diff == 0.1
    assert output_agreement([SAME, CLOSE]).within_tolerance is True


def test_the_tolerance_is_the_callers() -> None:
    assert output_agreement([LOSSY], top1_min=0.85, rel_max=0.1).within_tolerance is True
    assert output_agreement([CLOSE], top1_min=0.0, rel_max=0.0).within_tolerance is False
    assert output_agreement([SAME], top1_min=1.0, rel_max=0.0).within_tolerance is True
    regression = {**CLOSE, "top1_agreement": None}  # not classification-shaped: rel. diff only
    assert output_agreement([regression]).within_tolerance is True
    assert output_agreement([regression]).top1_agreement is None


def test_changed_output_shapes_are_outside_any_tolerance() -> None:
    changed = {**SAME, "mismatched": 3}
    result = output_agreement([changed], top1_min=0.0, rel_max=1e9)
    assert result.within_tolerance is False and "3 of 20 requests" in result.note


def test_no_outputs_is_not_visible_and_says_why() -> None:
    result = output_agreement([])
    assert not result.visible and result.within_tolerance is None
    assert result.note == "outputs not captured: no module call seen"
    why = {"samples": 0, "note": "outputs not captured: the model returned no tensor"}
    assert output_agreement([None, why]).note == why["note"]


def test_a_faster_candidate_that_changes_results_is_never_faster() -> None:
    changed = OutputAgreement(visible=True, within_tolerance=False)
    kept = OutputAgreement(visible=True, within_tolerance=True)
    unseen = OutputAgreement(visible=False)
    no_loss = LossParity(visible=False)
    assert final_verdict(FASTER, no_loss, changed) == CHANGES_RESULTS
    assert final_verdict(FASTER, no_loss, kept) == FASTER
    assert final_verdict(FASTER, no_loss, unseen) == FASTER
    loss_moved = LossParity(visible=True, within_tolerance=False)
    assert final_verdict(FASTER, loss_moved, unseen) == CHANGES_RESULTS
    stored = Comparison.from_dict(
        {"verdict": FASTER, "loss_parity": {"visible": True, "within_tolerance": False}}
    )
    assert final_verdict(FASTER, stored.loss_parity, None) == CHANGES_RESULTS  # parsed once
    assert final_verdict(SLOWER, loss_moved, changed) == SLOWER
    assert final_verdict(INCONCLUSIVE, no_loss, changed) == INCONCLUSIVE
    assert CHANGES_RESULTS in VERDICTS and VERDICT_LABELS[CHANGES_RESULTS] == CHANGES_RESULTS
    assert "verified" not in CHANGES_RESULTS


def test_compare_reports_both_arms_metrics_and_the_agreement() -> None:
    result = compare(_inference_rounds(CLOSE))
    assert result.kind == INFERENCE and result.verdict == FASTER == result.speed_verdict
    assert result.agreement.visible and result.agreement.within_tolerance
    assert result.baseline_metrics is not None and result.candidate_metrics is not None
    assert result.baseline_metrics.throughput_sps == pytest.approx(16 / 0.010, rel=0.03)
    assert result.candidate_metrics.latency_p50_s == pytest.approx(0.005, rel=0.03)
    body = result.to_dict()
    for key in ("baseline_step_s", "speedup", "ci_low", "verdict", "loss_parity", "stopped"):
        assert key in body  # every key the result had before
    assert body["candidate_metrics"]["peak_rss_bytes"] == 280 << 20
    assert body["agreement"]["top1_min"] == 0.99 and body["agreement"]["rel_max"] == 0.01
    json.dumps(body, allow_nan=False)


def test_compare_turns_a_lossy_faster_candidate_into_changes_results() -> None:
    result = compare(_inference_rounds(LOSSY))
    assert result.speed_verdict == FASTER and result.verdict == CHANGES_RESULTS
    strict = compare(_inference_rounds(CLOSE), top1_min=0.99, rel_max=0.0)
    assert strict.verdict == CHANGES_RESULTS and strict.agreement.rel_max == 0.0


def test_a_training_comparison_is_judged_by_its_loss_not_outputs() -> None:
    rounds = [
        Round(
            baseline=[0.2] * 10,
            candidate=[0.1] * 10,
            baseline_loss=[1.0] * 10,
            candidate_loss=[1.5] * 10,
            kind=TRAINING,
        )
        for _ in range(3)
    ]
    result = compare(rounds)
    assert result.kind == TRAINING and result.verdict == CHANGES_RESULTS
    assert not result.agreement.visible and "training" in result.agreement.note
    assert result.baseline_metrics is not None and result.baseline_metrics.throughput_sps is None


def test_the_kind_is_the_one_the_arms_agree_on() -> None:
    assert combined_kind([INFERENCE, None, UNKNOWN_KIND]) == INFERENCE
    assert combined_kind([INFERENCE, TRAINING]) == UNKNOWN_KIND
    assert combined_kind([]) == UNKNOWN_KIND


def test_a_round_pairs_the_arms_as_the_runner_posts_them() -> None:
    base = {
        "step_s": [0.01] * 5,
        "loss": [],
        "kind": "inference",
        "batch_sizes": [8] * 5,
        "peak_rss_bytes": 123,
        "cuda_max_allocated_bytes": None,
        "outputs": None,
    }
    cand = {**base, "step_s": [0.005] * 5, "peak_rss_bytes": 100, "outputs": CLOSE}
    paired = round_from_arms(base, cand, warmup=2)
    assert paired.kind == INFERENCE and paired.outputs == CLOSE
    assert paired.candidate_peak_rss_bytes == 100
    assert paired.baseline_batch_sizes == [8] * 3  # the 2 warm-up steps left out
    older = round_from_arms({"step_s": [0.1] * 3}, {"step_s": [0.1] * 3, "loss": [None]})
    assert older.kind == UNKNOWN_KIND and older.outputs is None


def _stored(comparison: Comparison) -> Comparison:
    """A comparison as the server reads it: stored as JSON, parsed back once."""
    return Comparison.from_dict(json.loads(json.dumps(comparison.to_dict())))


def _by_key(rows: list[dict]) -> dict[str, dict]:
    return {row["key"]: row for row in rows}


def test_the_inference_table_has_latency_throughput_memory_and_agreement() -> None:
    rows = before_after_rows(_stored(compare(_inference_rounds(CLOSE))))
    keys = [row["key"] for row in rows]
    assert keys == [
        "latency_p50_s",
        "latency_p99_s",
        "throughput_rps",
        "throughput_sps",
        "peak_rss_bytes",
        "top1_agreement",
        "max_rel_diff",
    ]
    table = _by_key(rows)
    p50 = table["latency_p50_s"]
    assert p50["before"].endswith(" ms") and p50["change"].startswith("-5")
    assert p50["better"] is True and p50["after_value"] < p50["before_value"]
    assert table["throughput_rps"]["after"].endswith(" req/s")
    assert table["throughput_rps"]["better"] is True
    assert table["throughput_sps"]["after"].endswith(" samples/s")
    assert table["peak_rss_bytes"]["before"] == "300.0 MiB"
    assert table["peak_rss_bytes"]["change"] == "-6.7%" and table["peak_rss_bytes"]["better"]
    assert table["top1_agreement"]["after"] == "100.0%"
    assert table["top1_agreement"]["before"] == "reference" and table["top1_agreement"]["better"]
    assert table["max_rel_diff"]["change"] == "within the 1e-02 tolerance"
    json.dumps(rows, allow_nan=False)


def test_the_inference_table_says_when_results_changed_or_were_not_seen() -> None:
    lossy = _by_key(before_after_rows(_stored(compare(_inference_rounds(LOSSY)))))
    assert lossy["top1_agreement"]["better"] is False
    assert lossy["top1_agreement"]["change"] == "below the 99% minimum"
    assert lossy["max_rel_diff"]["change"] == "above the 1e-02 tolerance"
    unseen = _by_key(before_after_rows(_stored(compare(_inference_rounds(None)))))
    assert unseen["agreement"]["after"] == "not measured" and unseen["agreement"]["better"] is None
    assert unseen["agreement"]["change"] == "outputs not captured: no module call seen"


def test_the_training_table_has_step_time_throughput_memory_and_loss() -> None:
    rounds = [
        Round(
            baseline=[0.2] * 10,
            candidate=[0.1] * 10,
            baseline_loss=[1.0] * 10,
            candidate_loss=[1.01] * 10,
            kind=TRAINING,
            baseline_peak_rss_bytes=2 << 30,
            candidate_peak_rss_bytes=2 << 30,
        )
        for _ in range(3)
    ]
    table = _by_key(before_after_rows(_stored(compare(rounds))))
    assert list(table) == ["step_time_mean_s", "throughput_steps_per_s", "peak_rss_bytes", "loss"]
    assert table["step_time_mean_s"]["before"] == "200 ms"
    assert table["step_time_mean_s"]["change"] == "-50.0%"
    assert table["throughput_steps_per_s"]["after"] == "10.0 steps/s"
    assert table["peak_rss_bytes"]["after"] == "2.00 GiB"
    assert table["peak_rss_bytes"]["better"] is None  # the same memory: no better, no worse
    assert table["loss"]["change"] == "+1.0% (within 5%)" and table["loss"]["better"] is True


def test_an_older_result_without_metrics_still_gives_a_table() -> None:
    older = {"baseline_step_s": 0.2, "candidate_step_s": 0.1, "loss_parity": {"visible": False}}
    table = _by_key(before_after_rows(Comparison.from_dict(older)))
    assert table["peak_rss_bytes"]["before"] == "not measured"
    assert table["peak_rss_bytes"]["better"] is None
    assert table["loss"]["after"] == "not visible"
