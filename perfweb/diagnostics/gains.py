"""Reads: the measured gains of a run's fixes, from their verifications (what the ranking and
the findings panel use; `verification.fix_verification_record` writes them)."""

from __future__ import annotations

from typing import Any

from perfweb.diagnostics.models import FixVerification
from perfweb.runs.models import Run


def fix_verifications_for_run(*, run: Run) -> dict[str, FixVerification]:
    """finding id -> the latest verification of that finding's fix on this run."""
    return {v.finding_id: v for v in FixVerification.objects.filter(run=run)}


def measured_gains_for_run(*, run: Run) -> dict[str, dict[str, Any]]:
    """For the ranking: finding id -> {status, measured_gain, speedup, ci_low, ci_high, job_id}.

    A verified fix ranks by `measured_gain` (fraction of step time recovered, 1 - 1/speedup)
    instead of its estimate; a refuted one ("refuted") has nothing measurable to recover; an
    inconclusive one keeps its estimate (shown with the measurement, not ranked by it).
    """
    return {
        finding_id: {
            "status": v.status,
            "measured_gain": v.measured_gain,
            "speedup": v.speedup,
            "ci_low": v.ci_low,
            "ci_high": v.ci_high,
            "job_id": v.job_id,
            "reason": v.reason,
        }
        for finding_id, v in fix_verifications_for_run(run=run).items()
    }


def verified_gains_for_run(*, run: Run) -> dict[str, float]:
    """`perfweb_recommender.evidence.Evidence.verified_gains` for this run: finding id -> the gain
    to rank by (the measured gain when verified, 0 when refuted). An inconclusive
    measurement is left out: the finding keeps its estimate."""
    return {
        finding_id: max(0.0, v.measured_gain) if v.status == FixVerification.VERIFIED else 0.0
        for finding_id, v in fix_verifications_for_run(run=run).items()
        if v.status != FixVerification.INCONCLUSIVE
    }
