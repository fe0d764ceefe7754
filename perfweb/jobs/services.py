"""Writes for optimisation jobs: create, claim, progress, finish, fail, cancel, expire.

The database decides: a claim is a conditional UPDATE of a queued row, and every runner call
carries the claim secret it got (only its sha256 is stored), so only the runner that claimed
a job can write to it, and a runner whose claim expired (or a job cancelled meanwhile) cannot
write a result. Claims are only for a host that an agent of the project recorded. The
result is never taken from the runner: speed-up, interval and verdict are recomputed here
from the stored per-round arms with the A/B engine's own functions (perfweb_contract.ab).
Knob settings come checked against the closed list of contract/perfweb_contract/knobs.py by whoever
read them (the request body's schema, a stored finding's `fix_knobs`), once in this process, and
again on the runner. A finished job is announced to diagnostics (`jobs.tasks.job_verify_task`),
which owns what the measurement verifies. docs/security.md has the threat model.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import statistics
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from celery import signature
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from perfweb.diagnostics.fix_knobs import finding_knob
from perfweb.errors import ClientError
from perfweb.jobs.models import Job, JobArm
from perfweb.jobs.schemas import DEFAULT_SIZES, JobSizes, arm_body
from perfweb.projects.models import Membership, Project
from perfweb.runs.models import Run
from perfweb_contract.ab.decision import compare, round_from_arms, settle, stop_of
from perfweb_contract.ab.presentation import stop_sentence
from perfweb_contract.ab.results import Comparison
from perfweb_contract.jobs import RUNNER_ID_MAX, TIME_BUDGET_S
from perfweb_contract.knobs import KnobValue

# A finished job's verification, by name: tasks.py imports this module to run its tasks, so
# this one sends the task by its registered name (apps.py registers it; Celery resolves the
# name to the task itself, so eager mode and routing are the task's).
VERIFY_TASK = "perfweb.jobs.tasks.job_verify_task"


class JobError(ClientError):
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
    knobs: Mapping[str, KnobValue],
    finding_id: str = "",
    sizes: JobSizes = DEFAULT_SIZES,
) -> Job:
    """Queue a job for the run's host; only a member of the run's project may. `knobs` come
    checked against the closed list by whoever read them (`validate_knobs` of a body,
    `parse_knobs` of the form's text, `fix_knobs` of a stored finding), `sizes` by
    `schemas.job_sizes`."""
    if not _is_member(user=user, project=run.project):
        raise NotAllowed("only members of the project can start jobs")
    if not knobs:
        raise JobError("choose at least one knob")
    if not run.command or not run.host:
        raise JobError("this run has no recorded command and host to measure")
    if finding_id and finding_knob(finding_id=finding_id, run=run) not in knobs:
        raise JobError(f"finding {finding_id} has no knob among {sorted(knobs)}")
    return Job.objects.create(
        project=run.project,
        run=run,
        host=run.host,
        finding_id=finding_id,
        knobs=dict(knobs),
        created_by=user,
        time_budget_s=TIME_BUDGET_S,
        **asdict(sizes),
    )


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
            status=Job.RUNNING,
            claim_token=claim_digest(secret),
            runner_id=runner_id[:RUNNER_ID_MAX],
            claimed_at=now,
            claim_expires_at=now + claim_ttl(),
        )
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


def _store_arm(*, job: Job, arm: Mapping[str, Any]) -> None:
    body = arm_body(dict(arm), max_rounds=job.max_rounds)
    settled = body.step_s[settle(body.step_s, minimum=job.warmup)[0] :]  # chart's figures
    try:
        with transaction.atomic():
            JobArm.objects.create(
                job=job,
                round=body.round,
                arm=body.arm,
                median_s=statistics.median(settled),
                mean_s=statistics.fmean(settled),
                step_s=body.step_s,
                loss=body.loss,
                kind=body.kind,
                batch_sizes=body.batch_sizes,
                peak_rss_bytes=body.peak_rss_bytes,
                cuda_max_allocated_bytes=body.cuda_max_allocated_bytes,
                outputs=body.outputs,
            )
    except IntegrityError:
        pass  # the same arm posted twice (a retry): stored once


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
    comparison = compare(rounds, top1_min=job.agreement_top1, rel_max=job.agreement_rtol)
    # A runner stops early only at its time bound; a decided verdict or the limit says so.
    stopped = (
        stop_of(
            verdict=comparison.verdict,
            rounds=len(rounds),
            max_rounds=job.max_rounds,
            out_of_time=True,
        )
        or ""
    )
    comparison.stopped = stopped
    comparison.stop_reason = stop_sentence(
        stopped=stopped, verdict=comparison.verdict, rounds=len(rounds), max_rounds=job.max_rounds
    )
    return comparison


def _arm_dict(arm: JobArm) -> dict[str, Any]:
    """A stored arm in the shape the runner posted it (`perfweb_agent.ab.engine.Arm.to_dict()`)."""
    return {
        "step_s": arm.step_s,
        "loss": arm.loss,
        "kind": arm.kind,
        "batch_sizes": arm.batch_sizes,
        "peak_rss_bytes": arm.peak_rss_bytes,
        "cuda_max_allocated_bytes": arm.cuda_max_allocated_bytes,
        "outputs": arm.outputs,
    }


def job_finish(*, job: Job, claim_token: str) -> Job:
    """Close the job with the comparison of its stored arms (whatever numbers the runner
    posted are ignored); the verification follows in a task on commit."""
    digest = _check_claim(job=job, claim_token=claim_token)
    if job.status != Job.RUNNING:
        raise StaleClaim(f"the job is {job.status}")
    comparison = job_comparison(job=job)
    with transaction.atomic():
        done = Job.objects.filter(id=job.id, status=Job.RUNNING, claim_token=digest).update(
            status=Job.SUCCEEDED,
            result=comparison.to_dict(),
            verdict=comparison.verdict,
            speedup=comparison.speedup,
            ci_low=comparison.ci_low,
            ci_high=comparison.ci_high,
            stop_reason=comparison.stop_reason[:200],
            finished_at=timezone.now(),
        )
        if done != 1:
            raise StaleClaim("the job is no longer running")
        transaction.on_commit(lambda: signature(VERIFY_TASK, args=(job.id,)).delay())
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
