"""Reads for optimisation jobs, scoped to the user's projects; and the measured gains that
the ranking of fixes uses (perfweb.jobs.selectors.measured_gains_for_run)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from perfweb.jobs.models import FixVerification, Job
from perfweb.jobs.services import changes_results_reason, claim_ttl
from perfweb.runs.models import Run
from perfweb_agent.ab.stats import before_after_rows
from perfweb_contract.verdicts import CHANGES_RESULTS


def job_queryset(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    """The jobs of the user's projects (nothing for anyone else)."""
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(project__memberships__user=user).select_related("run", "project")


def job_get_for_user(*, user: AbstractBaseUser | AnonymousUser, job_id: int) -> Job | None:
    return job_queryset(user=user).filter(id=job_id).first()


def job_list_for_run(*, run: Run, limit: int = 20) -> list[Job]:
    return list(run.jobs.order_by("-created_at", "-id")[:limit])


def job_for_runner(*, job: Job, claim_secret: str) -> dict[str, Any]:
    """What a runner gets when it claims a job: the run's recorded command, never another,
    and the claim secret (given once; the server keeps only its hash)."""
    return {
        "id": job.id,
        "claim_token": claim_secret,
        "run_id": job.run.run_id,
        "host": job.host,
        "command": job.run.command,
        "cwd": job.run.cwd,
        "knobs": job.knobs,
        "finding_id": job.finding_id,
        "rounds": job.rounds,
        "max_rounds": job.max_rounds,
        "time_budget_s": job.time_budget_s,
        "steps": job.steps,
        "warmup": job.warmup,
        # The output agreement a faster candidate must keep (the runner validates them too).
        "agreement_top1": job.agreement_top1,
        "agreement_rtol": job.agreement_rtol,
        "claim_ttl_s": claim_ttl().total_seconds(),  # post progress well within this
    }


def job_state(*, job: Job) -> dict[str, Any]:
    """The job page's poll: status, progress and the rounds measured so far."""
    arms = list(job.arms.order_by("round", "arm").values("round", "arm", "median_s", "mean_s"))
    seen = max((arm["round"] for arm in arms), default=0)
    total = 2 * max(job.rounds, seen)  # more rounds while the verdict is inconclusive
    return {
        "id": job.id,
        "status": job.status,
        "terminal": job.status in Job.TERMINAL,
        "run_id": job.run.run_id,
        "finding_id": job.finding_id,
        "knobs": job.knobs,
        "host": job.host,
        "runner_id": job.runner_id,  # who claimed it: the runner's word is its arms
        "progress": {"done": len(arms), "total": total, "fraction": len(arms) / total},
        "arms": arms,
        "result": job.result,
        "kind": (job.result or {}).get("kind", ""),  # training | inference | unknown
        # the before/after table the page and `perf-agent ab` print (perfweb_agent.ab.stats)
        "before_after": before_after_rows(job.result) if job.result else [],
        "results_check": results_check(job=job),
        "agreement_top1": job.agreement_top1,
        "agreement_rtol": job.agreement_rtol,
        "verdict": job.verdict,
        "verdict_label": job.verdict_label,
        "stop_reason": job.stop_reason,
        "max_rounds": job.max_rounds,
        "speedup": job.speedup,
        "ci_low": job.ci_low,
        "ci_high": job.ci_high,
        "error": job.error,
    }


def results_check(*, job: Job) -> str:
    """One sentence on whether the fix kept the results: output agreement for inference,
    loss parity for training; empty before the job has a result."""
    result = job.result
    if not result:
        return ""
    if result.get("verdict") == CHANGES_RESULTS:
        return f"{changes_results_reason(result)}. Not verified."
    agreement, parity = result.get("agreement") or {}, result.get("loss_parity") or {}
    parts = []
    if agreement.get("visible"):
        said = []
        if (top1 := agreement.get("top1_agreement")) is not None:
            said.append(f"top-1 {top1:.1%} (at least {agreement['top1_min']:.1%})")
        if (rel := agreement.get("max_rel_diff")) is not None:
            said.append(f"max rel. difference {rel:.2e} (at most {agreement['rel_max']:.0e})")
        state = "agree" if agreement.get("within_tolerance") else "differ"
        detail = ", ".join(said) or agreement.get("note", "")
        parts.append(f"Outputs {state} over {agreement.get('samples', 0)} requests: {detail}.")
    elif result.get("kind") == "inference":
        parts.append(f"Output agreement not measured ({agreement.get('note') or 'no outputs'}).")
    if parity.get("visible"):
        state = "within" if parity.get("within_tolerance") else "outside"
        parts.append(f"Loss {state} {parity.get('tolerance', 0):.0%} of the baseline's.")
    return " ".join(parts)


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
