"""Writes for optimisation jobs: create, claim, progress, finish, fail, cancel, expire, verify.

The database decides: a claim is a conditional UPDATE of a queued row, and every runner call
carries the claim secret it got (only its sha256 is stored), so only the runner that claimed
a job can write to it, and a runner whose claim expired (or a job cancelled meanwhile) cannot
write a result. Claims are only for a host that an agent of the project recorded. The
result is never taken from the runner: speed-up, interval and verdict are recomputed here
from the stored per-round arms with the A/B engine's own function (agent/ab/stats.py).
Knob settings are checked against the closed list of contract/knobs.py here and again on the
runner. docs/security.md has the threat model.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import statistics
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from perfweb.jobs.models import FixVerification, Job, JobArm
from perfweb.jobs.signals import fix_verification_changed
from perfweb.projects.models import Membership, Project
from perfweb.runs.models import Run
from perfweb_agent.ab.stats import (
    AGREEMENT_RTOL,
    AGREEMENT_TOP1_MIN,
    Comparison,
    changed_results_note,
    compare,
    final_verdict,
    planned_looks,
    round_from_arms,
    stop_of,
    stop_sentence,
)
from perfweb_contract.jobs import MAX_ROUNDS, SIZE_LIMITS
from perfweb_contract.knobs import FINDING_KNOBS, KNOBS, KnobError, validate_knobs
from perfweb_contract.verdicts import CHANGES_RESULTS, FASTER, INCONCLUSIVE, VERDICT_LABELS

# A job's output-agreement tolerance: top-1 agreement at least this share, the max relative
# difference at most this (0 demands identical outputs).
TOLERANCE_LIMITS = {"agreement_top1": (0.0, 1.0), "agreement_rtol": (0.0, 1.0)}
ARM_KINDS = ("training", "inference", "unknown")
MAX_BYTES = 1 << 50  # a peak memory above 1 PiB is not a measurement
MAX_BATCH = 1 << 31
TIME_BUDGET_S = 1800  # the runner starts no extra round that would end past this


class JobError(Exception):
    """A request about a job that cannot be honoured; the message is one sentence."""

    status = 400


class NotAllowed(JobError):
    status = 403


class StaleClaim(JobError):
    """The caller's claim is not (or no longer) the job's claim: 409."""

    status = 409


def claim_ttl() -> timedelta:
    """How long a claim lives without a progress post (PERFWEB_JOB_CLAIM_TTL, default 60 s)."""
    raw = getattr(settings, "PERFWEB_JOB_CLAIM_TTL", None) or os.environ.get(
        "PERFWEB_JOB_CLAIM_TTL", "60"
    )
    return timedelta(seconds=float(raw))


def _is_member(*, user: AbstractBaseUser, project: Project) -> bool:
    return (
        bool(user.is_authenticated)
        and Membership.objects.filter(project=project, user=user).exists()
    )


def finding_knob(*, finding_id: str, run: Run | None = None) -> str | None:
    """The knob that fixes a finding: the catalogue's (FIXES.md), else the one the run's
    stored finding proposes (`fix.knob`, e.g. `compile=default` on an inference finding),
    when that knob is on the closed list. None: the finding has no knob."""
    name = FINDING_KNOBS.get(finding_id)
    if name is not None or run is None:
        return name
    from perfweb.diagnostics.models import Finding  # diagnostics reads this module's gains

    fix = Finding.objects.filter(run=run, rule_id=finding_id).values_list("fix", flat=True).first()
    text = fix.get("knob") if isinstance(fix, dict) else None
    proposed = text.partition("=")[0].strip() if isinstance(text, str) else ""
    return proposed if proposed in KNOBS else None


def job_create(
    *,
    user: AbstractBaseUser,
    run: Run,
    knobs: Mapping[str, Any],
    finding_id: str = "",
    rounds: int = 5,
    steps: int = 20,
    warmup: int = 3,
    max_rounds: int = MAX_ROUNDS,
    agreement_top1: float = AGREEMENT_TOP1_MIN,
    agreement_rtol: float = AGREEMENT_RTOL,
) -> Job:
    """Queue a job for the run's host; only a member of the run's project may."""
    if not _is_member(user=user, project=run.project):
        raise NotAllowed("only members of the project can start jobs")
    try:
        settings_checked = validate_knobs(knobs)
    except KnobError as error:
        raise JobError(str(error)) from None
    if not settings_checked:
        raise JobError("choose at least one knob")
    if not run.command or not run.host:
        raise JobError("this run has no recorded command and host to measure")
    if finding_id and finding_knob(finding_id=finding_id, run=run) not in settings_checked:
        raise JobError(f"finding {finding_id} has no knob among {sorted(settings_checked)}")
    sizes = {"rounds": rounds, "steps": steps, "warmup": warmup}
    for name, (low, high) in SIZE_LIMITS.items():
        value = sizes[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise JobError(f"{name} must be in {low}..{high}")
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int):
        raise JobError(f"max_rounds must be in {rounds}..{MAX_ROUNDS}")
    if not rounds <= max_rounds <= MAX_ROUNDS:
        raise JobError(f"max_rounds must be in {rounds}..{MAX_ROUNDS}")
    tolerance = {"agreement_top1": agreement_top1, "agreement_rtol": agreement_rtol}
    for name, (least, most) in TOLERANCE_LIMITS.items():
        limit = tolerance[name]
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            raise JobError(f"{name} must be a number in {least:g}..{most:g}")
        if not (math.isfinite(limit) and least <= limit <= most):
            raise JobError(f"{name} must be a number in {least:g}..{most:g}")
    return Job.objects.create(
        project=run.project, run=run, host=run.host, finding_id=finding_id,
        knobs=settings_checked, created_by=user, max_rounds=max_rounds,
        time_budget_s=TIME_BUDGET_S, agreement_top1=float(agreement_top1),
        agreement_rtol=float(agreement_rtol), **sizes,
    )  # fmt: skip


def claim_digest(secret: str) -> str:
    """What is stored of a claim secret: its sha256 (a database dump cannot post results)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def job_claim(
    *, project: Project, host: str, runner_id: str, now: datetime | None = None
) -> tuple[Job, str] | None:
    """Claim the oldest queued job of this project for `host` (conditional UPDATE).

    Returns the job and its claim secret, which is handed out here once and stored hashed.
    A host on which no agent of the project recorded a run gets NotAllowed.
    """
    if not Run.objects.filter(project=project, host=host).exists():
        raise NotAllowed(f"no agent of this project recorded a run on host {host!r}")
    now = now or timezone.now()
    jobs_expire_claims(now=now)
    for _ in range(5):
        candidate = (
            Job.objects.filter(project=project, host=host, status=Job.QUEUED)
            .order_by("created_at", "id")
            .values_list("id", flat=True)
            .first()
        )
        if candidate is None:
            return None
        secret = secrets.token_urlsafe(32)
        claimed = Job.objects.filter(id=candidate, status=Job.QUEUED).update(
            status=Job.RUNNING, claim_token=claim_digest(secret), runner_id=runner_id[:64],
            claimed_at=now, claim_expires_at=now + claim_ttl(),
        )  # fmt: skip
        if claimed == 1:
            return Job.objects.select_related("run").get(id=candidate), secret
    return None


def _check_claim(*, job: Job, claim_token: str) -> str:
    """The stored digest of the caller's claim secret; StaleClaim unless it is the job's."""
    digest = claim_digest(claim_token) if claim_token else ""
    if not digest or not secrets.compare_digest(job.claim_token or "", digest):
        raise StaleClaim("this runner does not hold the job's claim")
    return digest


def job_progress(*, job: Job, claim_token: str, arm: Mapping[str, Any] | None) -> bool:
    """Store a measured arm (if any) and extend the claim. Returns True if cancelled."""
    digest = _check_claim(job=job, claim_token=claim_token)
    if job.status == Job.CANCELLED:
        return True
    if job.status != Job.RUNNING:
        raise StaleClaim(f"the job is {job.status}")
    if arm is not None:
        _store_arm(job=job, arm=arm)
    now = timezone.now()
    extended = Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=digest).update(
        claim_expires_at=now + claim_ttl()
    )
    return extended == 0 and Job.objects.filter(id=job.id, status=Job.CANCELLED).exists()


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise JobError(f"{name} is not a finite number")
    return float(value)


def _numbers(arm: Mapping[str, Any], name: str, *, allow_none: bool = False) -> list[float]:
    values = arm.get(name)
    if values is None and allow_none:
        return []
    if not isinstance(values, list) or len(values) > 10_000:
        raise JobError(f"arm.{name} must be a list of at most 10000 numbers")
    if allow_none:  # a loss may be missing or not finite at a step (a diverging run)
        return [math.nan if v is None else _finite(v, f"arm.{name}[{i}]") for i, v in
                enumerate(values)]  # fmt: skip
    return [_finite(value, f"arm.{name}[{i}]") for i, value in enumerate(values)]


def _store_arm(*, job: Job, arm: Mapping[str, Any]) -> None:
    number, which = arm.get("round"), arm.get("arm")
    if isinstance(number, bool) or not isinstance(number, int):
        number = None
    if number is None or not 1 <= number <= job.max_rounds:
        raise JobError(f"arm.round must be a whole number in 1..{job.max_rounds}")
    if which not in ("baseline", "candidate"):
        raise JobError("arm.arm must be baseline or candidate")
    step_s = _numbers(arm, "step_s")
    if len(step_s) < 3 or min(step_s) <= 0:
        raise JobError("arm.step_s must hold at least 3 positive step times")
    loss = [None if math.isnan(x) else x for x in _numbers(arm, "loss", allow_none=True)]
    kind = arm.get("kind", "unknown")
    if kind is None:
        kind = "unknown"
    if kind not in ARM_KINDS:
        raise JobError(f"arm.kind must be one of {', '.join(ARM_KINDS)}")
    batch_sizes = _batch_sizes(arm, steps=len(step_s))
    peak_rss = _bytes(arm, "peak_rss_bytes")
    cuda_peak = _bytes(arm, "cuda_max_allocated_bytes")
    outputs = _outputs(arm.get("outputs"))
    if outputs is not None and which != "candidate":
        raise JobError("arm.outputs is the candidate's agreement with the baseline: "
                       "only a candidate arm has it")  # fmt: skip
    try:
        with transaction.atomic():
            JobArm.objects.create(
                job=job, round=number, arm=which, median_s=statistics.median(step_s),
                mean_s=statistics.fmean(step_s), step_s=step_s, loss=loss, kind=kind,
                batch_sizes=batch_sizes, peak_rss_bytes=peak_rss,
                cuda_max_allocated_bytes=cuda_peak, outputs=outputs,
            )  # fmt: skip
    except IntegrityError:
        pass  # the same arm posted twice (a retry): stored once


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JobError(f"{name} must be a whole number in {low}..{high}")
    return value


def _batch_sizes(arm: Mapping[str, Any], *, steps: int) -> list[int] | None:
    """One batch size per kept step, or None when the agent saw none."""
    values = arm.get("batch_sizes")
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != steps:
        raise JobError(f"arm.batch_sizes must be null or a list of {steps} whole numbers, "
                       "one per step time")  # fmt: skip
    return [_whole(v, f"arm.batch_sizes[{i}]", 1, MAX_BATCH) for i, v in enumerate(values)]


def _bytes(arm: Mapping[str, Any], name: str) -> int | None:
    value = arm.get(name)
    return None if value is None else _whole(value, f"arm.{name}", 0, MAX_BYTES)


def _outputs(raw: Any) -> dict[str, Any] | None:
    """The candidate's output-agreement summary (agent/ab/outputs.py), checked field by field;
    unknown keys are dropped: what is stored is what the server understands."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise JobError("arm.outputs must be null or an object")
    summary: dict[str, Any] = {
        "samples": _whole(raw.get("samples"), "arm.outputs.samples", 0, 10**9),
        # requests whose output shape or finiteness differ: always outside tolerance
        "mismatched": _whole(raw.get("mismatched", 0), "arm.outputs.mismatched", 0, 10**9),
    }
    top1 = raw.get("top1_agreement")
    if top1 is not None and not 0.0 <= _finite(top1, "arm.outputs.top1_agreement") <= 1.0:
        raise JobError("arm.outputs.top1_agreement must be null or a number in 0..1")
    summary["top1_agreement"] = None if top1 is None else float(top1)
    for name in ("max_abs_diff", "mean_abs_diff", "max_rel_diff"):
        value = raw.get(name)  # None: nothing comparable (e.g. every output mismatched)
        if value is not None and _finite(value, f"arm.outputs.{name}") < 0:
            raise JobError(f"arm.outputs.{name} must be null or a number of at least 0")
        summary[name] = None if value is None else float(value)
    note = raw.get("note", "")
    if not isinstance(note, str) or len(note) > 200:
        raise JobError("arm.outputs.note must be a string of at most 200 characters")
    if note:
        summary["note"] = note
    return summary


def job_comparison(*, job: Job) -> Comparison:
    """The A/B comparison of the job's stored arms, by the engine's own functions: the
    server never takes a speed-up, interval or verdict from the runner."""
    arms: dict[int, dict[str, JobArm]] = {}
    for arm in JobArm.objects.filter(job=job).order_by("round"):
        arms.setdefault(arm.round, {})[arm.arm] = arm
    complete = [pair for _, pair in sorted(arms.items()) if len(pair) == 2]
    needed = max(job.rounds, 2)  # an interval needs 2 (a job queued before that rule had 1)
    if len(complete) < needed:
        raise JobError(f"the job has {len(complete)} complete rounds of the {needed} it needs")

    rounds = [
        round_from_arms(
            _arm_dict(pair["baseline"]), _arm_dict(pair["candidate"]), warmup=job.warmup
        )
        for pair in complete
    ]
    # The verdict is the engine's: speed from the interval, then the results check against
    # this job's tolerance (a faster candidate whose outputs or loss moved is never "faster").
    comparison = compare(
        rounds, looks=planned_looks(job.rounds, job.max_rounds),
        top1_min=job.agreement_top1, rel_max=job.agreement_rtol,
    )  # fmt: skip
    # A runner stops early only at its time bound; a decided verdict or the limit says so.
    stopped = stop_of(
        verdict=comparison.verdict, rounds=len(rounds), max_rounds=job.max_rounds,
        out_of_time=True,
    ) or ""  # fmt: skip
    comparison.stopped = stopped
    comparison.stop_reason = stop_sentence(
        stopped=stopped, verdict=comparison.verdict, rounds=len(rounds), max_rounds=job.max_rounds
    )
    return comparison


def _arm_dict(arm: JobArm) -> dict[str, Any]:
    """A stored arm in the shape the runner posted it (`perfweb_agent.ab.engine.Arm.to_dict()`)."""
    return {
        "step_s": arm.step_s, "loss": arm.loss, "kind": arm.kind,
        "batch_sizes": arm.batch_sizes, "peak_rss_bytes": arm.peak_rss_bytes,
        "cuda_max_allocated_bytes": arm.cuda_max_allocated_bytes, "outputs": arm.outputs,
    }  # fmt: skip


def job_finish(*, job: Job, claim_token: str) -> Job:
    """Close the job with the comparison of its stored arms (whatever numbers the runner
    posted are ignored); the verification follows in a task on commit."""
    digest = _check_claim(job=job, claim_token=claim_token)
    if job.status != Job.RUNNING:
        raise StaleClaim(f"the job is {job.status}")
    comparison = job_comparison(job=job)
    with transaction.atomic():
        done = Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=digest).update(
            status=Job.SUCCEEDED, result=comparison.to_dict(), verdict=comparison.verdict,
            speedup=comparison.speedup, ci_low=comparison.ci_low, ci_high=comparison.ci_high,
            stop_reason=comparison.stop_reason[:200], finished_at=timezone.now(),
        )  # fmt: skip
        if done != 1:
            raise StaleClaim("the job is no longer running")
        from perfweb.jobs.tasks import job_verify_task

        transaction.on_commit(lambda: job_verify_task.delay(job.id))
    job.refresh_from_db()
    return job


def job_fail(*, job: Job, claim_token: str, reason: str) -> Job:
    """The runner could not (or would not) run the job: failed, with its reason."""
    digest = _check_claim(job=job, claim_token=claim_token)
    Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=digest).update(
        status=Job.FAILED, error=str(reason)[:500] or "failed", finished_at=timezone.now()
    )
    job.refresh_from_db()
    return job


def job_cancel(*, job: Job, user: AbstractBaseUser) -> Job:
    """Cancel a queued or running job; a runner sees it on its next progress post."""
    if not _is_member(user=user, project=job.project):
        raise NotAllowed("only members of the project can cancel jobs")
    Job.objects.filter(id=job.id, status__in=(Job.QUEUED, Job.RUNNING)).update(
        status=Job.CANCELLED, error="cancelled from the dashboard", finished_at=timezone.now()
    )
    job.refresh_from_db()
    return job


def jobs_expire_claims(*, now: datetime | None = None) -> int:
    """Running jobs whose runner stopped reporting: failed, with the reason."""
    now = now or timezone.now()
    return Job.objects.filter(status=Job.RUNNING, claim_expires_at__lt=now).update(
        status=Job.FAILED,
        error="the runner stopped reporting (its claim expired); the workload was not finished",
        finished_at=now,
    )


def job_finding_id(*, job: Job) -> str:
    """The finding a job verifies: the one it was started from, or its single knob's."""
    if job.finding_id:
        return job.finding_id
    if len(job.knobs) == 1:
        (name,) = job.knobs
        return next((f for f, k in FINDING_KNOBS.items() if k == name), "")
    return ""


def changes_results_reason(result: Mapping[str, Any]) -> str:
    """Why a faster result is not verified, in one line with its numbers (the engine's
    words, `perfweb_agent.ab.stats.changed_results_note`; the run page's badge says it)."""
    note = changed_results_note({**result, "verdict": CHANGES_RESULTS}) or "results moved"
    return f"{CHANGES_RESULTS}: {note}"[:200]


def fix_verification_update(*, job: Job) -> FixVerification | None:
    """Turn a succeeded job into its finding's verification (safe to run twice)."""
    if job.status != Job.SUCCEEDED or not job.result:
        return None
    finding_id = job_finding_id(job=job)
    if not finding_id:
        return None
    newer = FixVerification.objects.filter(
        run=job.run, finding_id=finding_id, job_id__gt=job.id
    ).first()
    if newer is not None:
        return newer  # a later job's measurement stands
    result = job.result
    # Re-checked here, not only taken from the stored verdict: a result stored before the
    # results check existed (or with a loss out of tolerance) must not be verified either.
    verdict = final_verdict(result["verdict"], result.get("loss_parity"), result.get("agreement"))
    if verdict == FASTER:
        status, reason = FixVerification.VERIFIED, "measured faster"
    elif verdict == CHANGES_RESULTS:  # never a verified gain: the ranking gets 0
        status, reason = FixVerification.REFUTED, changes_results_reason(result)
    elif verdict == INCONCLUSIVE:  # the ranking keeps the finding's estimate
        status, reason = FixVerification.INCONCLUSIVE, VERDICT_LABELS[INCONCLUSIVE]
    else:
        status, reason = FixVerification.REFUTED, verdict
    verification, _ = FixVerification.objects.update_or_create(
        run=job.run, finding_id=finding_id,
        defaults={
            "job": job, "status": status, "reason": reason,
            "measured_gain": float(result["measured_gain"]), "speedup": float(result["speedup"]),
            "ci_low": float(result["ci_low"]), "ci_high": float(result["ci_high"]),
        },
    )  # fmt: skip
    fix_verification_changed.send(
        sender=FixVerification, run=job.run, finding_id=finding_id, verification=verification
    )
    return verification
