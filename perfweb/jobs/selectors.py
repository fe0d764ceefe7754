"""Reads for optimisation jobs, scoped to the user's projects (what a job's measurement
verifies, and the gains the ranking uses, are diagnostics': perfweb.diagnostics.gains)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from perfweb.diagnostics import estimate
from perfweb.diagnostics.verification import changes_results_reason, unverified_because
from perfweb.jobs.models import Job
from perfweb.jobs.services import claim_ttl
from perfweb.runs.models import Run
from perfweb_contract.ab.presentation import before_after_rows
from perfweb_contract.ab.results import Comparison
from perfweb_contract.verdicts import CHANGES_RESULTS, FASTER


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


def job_progress(*, job: Job, arms_done: int, rounds_seen: int) -> dict[str, Any]:
    """The progress bar: arms measured of the minimum rounds' arms; past the minimum the
    engine adds rounds only while the interval is too wide, so the end is not known and the
    bar says so (`fraction` None: an indeterminate bar) instead of sitting full."""
    terminal = job.status in Job.TERMINAL
    minimum = 2 * job.rounds
    extra = not terminal and arms_done >= minimum
    if terminal:
        fraction: float | None = 1.0
    elif extra:
        fraction = None
    else:
        fraction = arms_done / minimum
    rounds_done = arms_done // 2
    if terminal:
        text = f"{rounds_done} round{'' if rounds_done == 1 else 's'} measured"
    elif extra:
        text = (
            f"round {rounds_seen} of at most {job.max_rounds}: {job.rounds} measured, the "
            "interval is still too wide to decide, so it measures more"
        )
    else:
        text = f"{rounds_done} of {job.rounds} rounds measured (up to {job.max_rounds} if needed)"
    return {
        "done": arms_done,
        "total": max(minimum, arms_done) if terminal else minimum,
        "fraction": fraction,
        "extra_rounds": extra,
        "text": text,
    }


def job_state(*, job: Job) -> dict[str, Any]:
    """The job page's poll: state, verdict, progress and the rounds measured so far."""
    arms = list(job.arms.order_by("round", "arm").values("round", "arm", "median_s", "mean_s"))
    seen = max((arm["round"] for arm in arms), default=0)
    return {
        "id": job.id,
        "status": job.status,
        "state": job.state,
        "terminal": job.status in Job.TERMINAL,
        "duration": job_duration_json(job=job),
        "run_id": job.run.run_id,
        "finding_id": job.finding_id,
        "knobs": job.knobs,
        "host": job.host,
        "runner_id": job.runner_id,  # who claimed it: the runner's word is its arms
        "progress": job_progress(job=job, arms_done=len(arms), rounds_seen=seen),
        "arms": arms,
        "result": job.result,
        "kind": (job.result or {}).get("kind", ""),  # training | inference | unknown
        # the before/after table the page and `perf-agent ab` print (perfweb_contract.ab)
        "before_after": before_after_rows(Comparison.from_dict(job.result)) if job.result else [],
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


def job_duration_json(*, job: Job) -> dict[str, Any] | None:
    """The expected and longest duration (perfweb.diagnostics.estimate) with its sentence;
    once the job has ended, how long it took. None when the run timed no step to estimate
    from."""
    took = (job.finished_at - job.created_at).total_seconds() if job.finished_at else None
    inference = (job.result or {}).get("kind") == "inference"
    unit = "request" if inference else estimate.run_unit(job.run)
    timing = estimate.run_timing(run=job.run, unit=unit)
    if timing is None:
        return None if took is None else {"took_s": took, "sentence": ""}
    guess = estimate.job_duration(
        timing=timing,
        rounds=job.rounds,
        max_rounds=job.max_rounds,
        steps=job.steps,
        warmup=job.warmup,
        time_budget_s=job.time_budget_s,
    )
    return {**guess.as_json(), "sentence": estimate.estimate_sentence(guess), "took_s": took}


def run_duration_estimate(
    *, run: Run, rounds: int, max_rounds: int, steps: int, warmup: int, time_budget_s: float
) -> dict[str, Any] | None:
    """The new-job form's estimate for the given sizes (None without steps to go by)."""
    timing = estimate.run_timing(run=run, unit=estimate.run_unit(run))
    if timing is None:
        return None
    guess = estimate.job_duration(
        timing=timing,
        rounds=rounds,
        max_rounds=max_rounds,
        steps=steps,
        warmup=warmup,
        time_budget_s=time_budget_s,
    )
    return {**guess.as_json(), "sentence": estimate.estimate_sentence(guess)}


def results_check(*, job: Job) -> str:
    """One sentence on whether the fix kept the results: output agreement for inference,
    loss parity for training; empty before the job has a result."""
    if not job.result:
        return ""
    result = Comparison.from_dict(job.result)
    if result.verdict == CHANGES_RESULTS:
        return f"{changes_results_reason(result)}. Not verified."
    agreement, parity = result.agreement, result.loss_parity
    parts = []
    if agreement.visible:
        said = []
        if (top1 := agreement.top1_agreement) is not None:
            said.append(f"top-1 {top1:.1%} (at least {agreement.top1_min:.1%})")
        if (rel := agreement.max_rel_diff) is not None:
            said.append(f"max rel. difference {rel:.2e} (at most {agreement.rel_max:.0e})")
        state = "agree" if agreement.within_tolerance else "differ"
        detail = ", ".join(said) or agreement.note
        parts.append(f"Outputs {state} over {agreement.samples} requests: {detail}.")
    elif result.kind == "inference":
        parts.append(f"Output agreement not measured ({agreement.note or 'no outputs'}).")
    if parity.visible:
        state = "within" if parity.within_tolerance else "outside"
        parts.append(f"Loss {state} {parity.tolerance:.0%} of the baseline's.")
    if result.verdict == FASTER and (missing := unverified_because(run=job.run, result=result)):
        parts.append(f"Not verified: {missing}.")
    return " ".join(parts)
