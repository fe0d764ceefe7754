"""A finding's fix measured: a finished job's comparison becomes the verification of the fix
it measured (verified, refuted or inconclusive, with the measured gain), and the run is
re-ranked. The jobs app announces a finished job here with its comparison (`jobs.tasks`);
nothing here reads the jobs app (its data arrives as arguments), so the jobs app sits above
this one and this one above the recommender.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from perfweb.diagnostics.models import FixVerification
from perfweb.diagnostics.services import diagnosis_enqueue
from perfweb.runs.models import Run
from perfweb_contract.ab.presentation import changed_results_note
from perfweb_contract.ab.results import (
    INFERENCE,
    TRAINING,
    UNKNOWN_KIND,
    Comparison,
    final_verdict,
    missing_evidence,
)
from perfweb_contract.knobs import FINDING_KNOBS
from perfweb_contract.verdicts import CHANGES_RESULTS, FASTER, INCONCLUSIVE, VERDICT_LABELS
from perfweb_recommender.coverage import workload_kind


def verified_finding_id(*, finding_id: str, knobs: Mapping[str, Any]) -> str:
    """The finding a job verifies: the one it was started from, or its single knob's."""
    if finding_id:
        return finding_id
    if len(knobs) == 1:
        (name,) = knobs
        return next((f for f, k in FINDING_KNOBS.items() if k == name), "")
    return ""


def changes_results_reason(result: Comparison) -> str:
    """Why a faster result is not verified, in one line with its numbers (the engine's
    words, `perfweb_contract.ab.presentation.changed_results_note`; the run page's badge)."""
    changed = dataclasses.replace(result, verdict=CHANGES_RESULTS)
    note = changed_results_note(changed) or "results moved"
    return f"{CHANGES_RESULTS}: {note}"[:200]


def unverified_because(*, run: Run, result: Comparison) -> str:
    """Why a job's `result` on `run` cannot verify its fix
    (`perfweb_contract.ab.results.missing_evidence`); "" when it can. The kind whose evidence is
    needed is the run's own, as its agent recorded it, when known: a runner cannot call an
    inference run's arms training (and post losses instead of outputs) to leave the output
    agreement out."""
    kind = workload_kind(facts=run.facts or {}, steps=run.step_count)
    if kind not in (TRAINING, INFERENCE):
        kind = str(result.kind or UNKNOWN_KIND)
    return missing_evidence(kind=kind, loss_parity=result.loss_parity, agreement=result.agreement)


def fix_verification_record(
    *, run: Run, job_id: int, finding_id: str, knobs: Mapping[str, Any], result: Mapping[str, Any]
) -> FixVerification | None:
    """A succeeded job's comparison (`result`: the A/B engine's `Comparison.to_dict()` as the
    job stored it, parsed once here) as the verification of the fix of the finding it
    measured, and the run re-ranked on commit. Safe to run twice; a later job's verification
    of the same finding stands. None: the job measured no finding."""
    finding_id = verified_finding_id(finding_id=finding_id, knobs=knobs)
    if not finding_id:
        return None
    newer = FixVerification.objects.filter(
        run=run, finding_id=finding_id, job_id__gt=job_id
    ).first()
    if newer is not None:
        return newer  # a later job's measurement stands
    comparison = Comparison.from_dict(result)
    status, reason = _status(run=run, result=comparison)
    verification, _ = FixVerification.objects.update_or_create(
        run=run,
        finding_id=finding_id,
        defaults={
            "job_id": job_id,
            "status": status,
            "reason": reason,
            "measured_gain": float(comparison.measured_gain),
            "speedup": float(comparison.speedup),
            "ci_low": float(comparison.ci_low),
            "ci_high": float(comparison.ci_high),
        },
    )
    run_pk = run.pk  # a measured gain beats the estimate: the ranking changes
    transaction.on_commit(lambda: diagnosis_enqueue(run_pk=run_pk))
    return verification


def _status(*, run: Run, result: Comparison) -> tuple[str, str]:
    # Re-checked here, not only taken from the stored verdict: a result stored before the
    # results check existed (or with a loss out of tolerance) must not be verified either.
    verdict = final_verdict(result.verdict, result.loss_parity, result.agreement)
    missing = unverified_because(run=run, result=result)
    if verdict == FASTER and missing:  # the speed stands; the ranking keeps the estimate
        return FixVerification.INCONCLUSIVE, f"faster, not verified: {missing}"[:200]
    if verdict == FASTER:
        return FixVerification.VERIFIED, "measured faster"
    if verdict == CHANGES_RESULTS:  # never a verified gain: the ranking gets 0
        return FixVerification.REFUTED, changes_results_reason(result)
    if verdict == INCONCLUSIVE:  # the ranking keeps the finding's estimate
        return FixVerification.INCONCLUSIVE, VERDICT_LABELS[INCONCLUSIVE]
    return FixVerification.REFUTED, verdict
