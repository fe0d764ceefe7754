"""What pages and `perf-agent ab` print of a comparison: the before/after table, why it stopped,
why a faster fix changed results, the warm-up. One table and one set of sentences for both."""

from __future__ import annotations

from typing import Any

from perfweb_contract.ab.decision import MIN_EFFECT
from perfweb_contract.ab.results import (
    INFERENCE,
    LOSS_TOLERANCE,
    NO_OUTPUTS_NOTE,
    STOP_DECIDED,
    STOP_ROUND_LIMIT,
    UNKNOWN_KIND,
    ArmMetrics,
    Comparison,
    LossParity,
    OutputAgreement,
    is_number,
)
from perfweb_contract.verdicts import CHANGES_RESULTS, VERDICT_LABELS

LOWER, HIGHER = "lower", "higher"  # which direction of a metric is the better one


def stop_sentence(*, stopped: str, verdict: str, rounds: int, max_rounds: int) -> str:
    """The stop reason in one sentence, as the job page and `perf-agent ab` show it."""
    if stopped == STOP_DECIDED:
        return f"stopped after {rounds} rounds: the interval decided ({VERDICT_LABELS[verdict]})"
    if stopped == STOP_ROUND_LIMIT:
        return f"stopped at the round limit ({max_rounds}) with the interval still too wide"
    return f"stopped at the time bound after {rounds} of {max_rounds} rounds, interval too wide"


def warmup_sentence(comparison: Comparison) -> str:
    """Each arm's warm-up (the steps left out until its step time settled) and the fix's
    one-off cost: what the candidate's warm-up took beyond the baseline's, per process."""
    base, cand = comparison.baseline_metrics, comparison.candidate_metrics
    if base is None or cand is None:
        return ""
    unit = "requests" if comparison.kind == INFERENCE else "steps"
    cost = comparison.warmup_cost_s
    sign = "+" if cost >= 0 else "-"
    return (
        f"{base.warmup_steps:.1f} {unit} before, {cand.warmup_steps:.1f} after until the time "
        f"settled; one-off cost of the fix {sign}{_duration(abs(cost))} per process start"
    )


def changed_results_note(comparison: Comparison) -> str:
    """Why a CHANGES_RESULTS comparison changed results, with its numbers; "" for any other
    verdict."""
    if comparison.verdict != CHANGES_RESULTS:
        return ""
    reasons = []
    agreement = comparison.agreement
    if agreement.visible and agreement.within_tolerance is False:
        top1, top1_min = agreement.top1_agreement, agreement.top1_min
        if is_number(top1) and is_number(top1_min) and top1 < top1_min:  # type: ignore[operator]
            reasons.append(f"top-1 agreement {top1:.1%} below the {top1_min:.0%} minimum")
        rel, rel_max = agreement.max_rel_diff, agreement.rel_max
        if is_number(rel) and is_number(rel_max) and rel > rel_max:  # type: ignore[operator]
            reasons.append(f"max rel. diff {rel:.2e} above the {rel_max:.0e} tolerance")
        if not reasons:
            reasons.append(str(agreement.note or "outputs changed"))
    parity = comparison.loss_parity
    if parity.visible and parity.within_tolerance is False:
        difference, tolerance = parity.relative_difference, parity.tolerance
        if is_number(difference) and is_number(tolerance):
            reasons.append(f"loss {difference:.1%} from the baseline's, outside {tolerance:.0%}")
    return "; ".join(reasons)


def before_after_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """The before/after table of a comparison, row by row.

    Inference: latency p50 and p99, throughput (requests/s, samples/s where known), peak
    memory (RSS, CUDA max allocated where known) and output agreement (top-1, max relative
    difference). Training (and an unknown kind): step time, throughput (steps/s, samples/s),
    peak memory and loss parity. Each row: `metric` (label), `key`, display strings
    `before`, `after`, `change`, raw `before_value`/`after_value` (None when not measured)
    and `better`: True / False when the candidate is better / worse by at least MIN_EFFECT
    (for agreement and loss: within / outside tolerance), None when it cannot tell.
    """
    kind = comparison.kind or UNKNOWN_KIND
    base = comparison.baseline_metrics or _UNMEASURED
    cand = comparison.candidate_metrics or _UNMEASURED
    rows: list[dict[str, Any]] = []
    if kind == INFERENCE:
        for name, key in (("latency p50", "latency_p50_s"), ("latency p99", "latency_p99_s")):
            rows.append(_row(name, key, getattr(base, key), getattr(cand, key), _duration, LOWER))
        rows.append(
            _row(
                "throughput",
                "throughput_rps",
                base.throughput_rps,
                cand.throughput_rps,
                _rate("req/s"),
                HIGHER,
            )
        )
    else:
        before, after = comparison.baseline_step_s, comparison.candidate_step_s
        rows.append(_row("step time (mean)", "step_time_mean_s", before, after, _duration, LOWER))
        rows.append(
            _row(
                "throughput",
                "throughput_steps_per_s",
                _inverse(before),
                _inverse(after),
                _rate("steps/s"),
                HIGHER,
            )
        )
    if base.throughput_sps is not None or cand.throughput_sps is not None:
        rows.append(
            _row(
                "throughput",
                "throughput_sps",
                base.throughput_sps,
                cand.throughput_sps,
                _rate("samples/s"),
                HIGHER,
            )
        )
    rows.append(
        _row(
            "peak memory (RSS)",
            "peak_rss_bytes",
            base.peak_rss_bytes,
            cand.peak_rss_bytes,
            _bytes,
            LOWER,
        )
    )
    cuda = "cuda_max_allocated_bytes"
    if base.cuda_max_allocated_bytes is not None or cand.cuda_max_allocated_bytes is not None:
        rows.append(
            _row(
                "CUDA max allocated",
                cuda,
                base.cuda_max_allocated_bytes,
                cand.cuda_max_allocated_bytes,
                _bytes,
                LOWER,
            )
        )
    if kind == INFERENCE or comparison.agreement.visible:
        rows.extend(_agreement_rows(comparison.agreement))
    if kind != INFERENCE:
        rows.append(_loss_row(comparison.loss_parity))
    return rows


# The metrics of an arm a stored result lacks: every row says "not measured".
_UNMEASURED = ArmMetrics(
    latency_p50_s=None, latency_p99_s=None, throughput_rps=None, throughput_sps=None,  # type: ignore[arg-type]
    step_time_s=None, peak_rss_bytes=None, cuda_max_allocated_bytes=None,  # type: ignore[arg-type]
)  # fmt: skip


def _row(
    metric: str,
    key: str,
    before: float | None,
    after: float | None,
    show: Any,
    direction: str,
) -> dict[str, Any]:
    change, better = "", None
    if is_number(before) and is_number(after) and before:
        relative = after / before - 1.0  # type: ignore[operator]
        change = f"{relative:+.1%}"
        gain = -relative if direction == LOWER else relative
        better = True if gain >= MIN_EFFECT else False if gain <= -MIN_EFFECT else None
    return {
        "metric": metric,
        "key": key,
        "before": show(before) if is_number(before) else "not measured",
        "after": show(after) if is_number(after) else "not measured",
        "change": change,
        "better": better,
        "before_value": before if is_number(before) else None,
        "after_value": after if is_number(after) else None,
    }


def _agreement_rows(agreement: OutputAgreement) -> list[dict[str, Any]]:
    if not agreement.visible:
        note = agreement.note or NO_OUTPUTS_NOTE
        return [_check_row("output agreement", "agreement", "not measured", None, note, None)]
    rows = []
    top1, top1_min = agreement.top1_agreement, agreement.top1_min
    if is_number(top1) and is_number(top1_min):
        within = top1 >= top1_min  # type: ignore[operator]
        change = f"{'within' if within else 'below'} the {top1_min:.0%} minimum"
        rows.append(
            _check_row("top-1 agreement", "top1_agreement", f"{top1:.1%}", top1, change, within)
        )
    rel, rel_max = agreement.max_rel_diff, agreement.rel_max
    if is_number(rel) and is_number(rel_max):
        within = rel <= rel_max  # type: ignore[operator]
        change = f"{'within' if within else 'above'} the {rel_max:.0e} tolerance"
        rows.append(_check_row("max rel. diff", "max_rel_diff", f"{rel:.2e}", rel, change, within))
    if agreement.within_tolerance is False and not rows:  # e.g. shapes changed
        note = agreement.note or "outputs changed"
        rows.append(_check_row("output agreement", "agreement", "changed", None, note, False))
    return rows


def _check_row(
    metric: str, key: str, after: str, value: float | None, change: str, better: bool | None
) -> dict[str, Any]:
    return {
        "metric": metric,
        "key": key,
        "before": "reference",
        "after": after,
        "change": change,
        "better": better,
        "before_value": None,
        "after_value": value,
    }


def _loss_row(parity: LossParity) -> dict[str, Any]:
    before, after = parity.baseline_loss, parity.candidate_loss
    if not parity.visible or not (is_number(before) and is_number(after)):
        row = _check_row("loss (median)", "loss", "not visible", None, "", None)
        return {**row, "before": "not visible"}
    assert before is not None and after is not None
    within = bool(parity.within_tolerance)
    tolerance = parity.tolerance if is_number(parity.tolerance) else LOSS_TOLERANCE
    difference = after / before - 1.0 if before else 0.0
    state = "within" if within else "outside"
    return {
        "metric": "loss (median)",
        "key": "loss",
        "before": f"{before:.4g}",
        "after": f"{after:.4g}",
        "change": f"{difference:+.1%} ({state} {tolerance:.0%})",
        "better": within,
        "before_value": before,
        "after_value": after,
    }


def duration_text(seconds: float) -> str:
    """A duration as pages say it: `45 s`, `4 min 10 s`, `1 h 05 min`."""
    total = max(int(round(seconds)), 0)
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s" if minutes < 10 else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _inverse(value: float | None) -> float | None:
    return 1.0 / value if is_number(value) and value else None  # type: ignore[operator]


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} \u00b5s"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _rate(unit: str) -> Any:
    def show(value: float) -> str:
        digits = 0 if value >= 100 else 1 if value >= 10 else 2
        return f"{value:,.{digits}f} {unit}"

    return show


def _bytes(value: float) -> str:
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:,.1f} MiB"
