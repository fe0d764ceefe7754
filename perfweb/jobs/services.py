"""Writes for optimisation jobs: create, claim, progress, finish, fail, cancel, expire, verify.

The database decides: a claim is a conditional UPDATE of a queued row, and every runner call
carries the claim token it got, so a runner whose claim expired (or a job cancelled meanwhile)
cannot write a result. Knob settings are checked against the closed list of agent/knobs.py
here and again on the runner.
"""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent.abstats import FASTER, NO_DIFFERENCE, SLOWER
from agent.knobs import FINDING_KNOBS, KnobError, validate_knobs
from perfweb.jobs.models import FixVerification, Job, JobArm
from perfweb.jobs.signals import fix_verification_changed
from perfweb.projects.models import Membership, Project
from perfweb.runs.models import Run

SIZE_LIMITS = {"rounds": (1, 20), "steps": (3, 1000), "warmup": (0, 100)}
VERDICTS = (FASTER, SLOWER, NO_DIFFERENCE)
RESULT_NUMBERS = ("baseline_step_s", "candidate_step_s", "speedup", "ci_low", "ci_high")


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


def job_create(
    *,
    user: AbstractBaseUser,
    run: Run,
    knobs: Mapping[str, Any],
    finding_id: str = "",
    rounds: int = 5,
    steps: int = 20,
    warmup: int = 3,
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
    if finding_id and FINDING_KNOBS.get(finding_id) not in settings_checked:
        raise JobError(f"finding {finding_id} has no knob among {sorted(settings_checked)}")
    sizes = {"rounds": rounds, "steps": steps, "warmup": warmup}
    for name, (low, high) in SIZE_LIMITS.items():
        if not low <= int(sizes[name]) <= high:
            raise JobError(f"{name} must be in {low}..{high}")
    return Job.objects.create(
        project=run.project, run=run, host=run.host, finding_id=finding_id,
        knobs=settings_checked, created_by=user, **sizes,
    )  # fmt: skip


def job_claim(
    *, project: Project, host: str, runner_id: str, now: datetime | None = None
) -> Job | None:
    """Claim the oldest queued job of this project for `host` (conditional UPDATE)."""
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
        claimed = Job.objects.filter(id=candidate, status=Job.QUEUED).update(
            status=Job.RUNNING, claim_token=secrets.token_hex(16), runner_id=runner_id[:64],
            claimed_at=now, claim_expires_at=now + claim_ttl(),
        )  # fmt: skip
        if claimed == 1:
            return Job.objects.select_related("run").get(id=candidate)
    return None


def _check_claim(*, job: Job, claim_token: str) -> None:
    if not claim_token or not secrets.compare_digest(job.claim_token or "", claim_token):
        raise StaleClaim("this runner does not hold the job's claim")


def job_progress(*, job: Job, claim_token: str, arm: Mapping[str, Any] | None) -> bool:
    """Store a measured arm (if any) and extend the claim. Returns True if cancelled."""
    _check_claim(job=job, claim_token=claim_token)
    if job.status == Job.CANCELLED:
        return True
    if job.status != Job.RUNNING:
        raise StaleClaim(f"the job is {job.status}")
    if arm is not None:
        _store_arm(job=job, arm=arm)
    now = timezone.now()
    extended = Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=claim_token).update(
        claim_expires_at=now + claim_ttl()
    )
    return extended == 0 and Job.objects.filter(id=job.id, status=Job.CANCELLED).exists()


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise JobError(f"{name} is not a finite number")
    return float(value)


def _store_arm(*, job: Job, arm: Mapping[str, Any]) -> None:
    number, which = arm.get("round"), arm.get("arm")
    if not isinstance(number, int) or not 1 <= number <= job.rounds:
        raise JobError(f"arm.round must be a whole number in 1..{job.rounds}")
    if which not in ("baseline", "candidate"):
        raise JobError("arm.arm must be baseline or candidate")
    steps = arm.get("step_s")
    if not isinstance(steps, list) or len(steps) > 10_000:
        raise JobError("arm.step_s must be a list of at most 10000 numbers")
    step_s = [_finite(value, f"arm.step_s[{i}]") for i, value in enumerate(steps)]
    median = _finite(arm.get("median_s"), "arm.median_s")
    mean = _finite(arm["mean_s"], "arm.mean_s") if arm.get("mean_s") is not None else None
    try:
        with transaction.atomic():
            JobArm.objects.create(
                job=job, round=number, arm=which, median_s=median, mean_s=mean, step_s=step_s
            )
    except IntegrityError:
        pass  # the same arm posted twice (a retry): stored once


def _check_result(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise JobError("result must be an object")
    for name in RESULT_NUMBERS:
        if _finite(result.get(name), f"result.{name}") <= 0:
            raise JobError(f"result.{name} must be positive")
    if result.get("verdict") not in VERDICTS:
        raise JobError(f"result.verdict must be one of {', '.join(VERDICTS)}")
    _finite(result.get("measured_gain"), "result.measured_gain")
    return result


def job_finish(*, job: Job, claim_token: str, result: Any) -> Job:
    """Store the runner's result; the verification follows in a task on commit."""
    _check_claim(job=job, claim_token=claim_token)
    checked = _check_result(result)
    with transaction.atomic():
        done = Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=claim_token).update(
            status=Job.SUCCEEDED, result=checked, verdict=checked["verdict"],
            speedup=checked["speedup"], ci_low=checked["ci_low"], ci_high=checked["ci_high"],
            finished_at=timezone.now(),
        )  # fmt: skip
        if done != 1:
            raise StaleClaim("the job is no longer running")
        from perfweb.jobs.tasks import job_verify_task

        transaction.on_commit(lambda: job_verify_task.delay(job.id))
    job.refresh_from_db()
    return job


def job_fail(*, job: Job, claim_token: str, reason: str) -> Job:
    """The runner could not (or would not) run the job: failed, with its reason."""
    _check_claim(job=job, claim_token=claim_token)
    Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=claim_token).update(
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
    parity = result.get("loss_parity") or {}
    loss_ok = not parity.get("visible") or parity.get("within_tolerance") is not False
    if result["verdict"] == FASTER and loss_ok:
        status, reason = FixVerification.VERIFIED, "measured faster"
    elif result["verdict"] == FASTER:
        status, reason = FixVerification.REFUTED, "faster, but the loss moved beyond tolerance"
    else:
        status, reason = FixVerification.REFUTED, result["verdict"]
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
