"""Celery tasks of optimisation jobs: take ids, re-read state, safe to run twice."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from perfweb.diagnostics.models import FixVerification
from perfweb.diagnostics.verification import fix_verification_record
from perfweb.jobs.models import Job
from perfweb.jobs.services import jobs_expire_claims


def job_announce(*, job: Job) -> FixVerification | None:
    """A succeeded job's comparison, announced to diagnostics: the verification of the fix it
    measured (the ranking reads it). Nothing for a job that has not succeeded."""
    if job.status != Job.SUCCEEDED or not job.result:
        return None
    return fix_verification_record(
        run=job.run, job_id=job.id, finding_id=job.finding_id, knobs=job.knobs, result=job.result
    )


@shared_task(acks_late=True, ignore_result=True)
def job_verify_task(job_id: int) -> None:
    """A job succeeded: its finding becomes verified or refuted (the ranking reads it)."""
    job = Job.objects.select_related("run").filter(id=job_id).first()
    if job is None:  # deleted meanwhile
        return
    job_announce(job=job)


@shared_task(acks_late=True, ignore_result=True)
def sweep_expired_jobs_task() -> int:
    """Beat: jobs whose runner stopped reporting are failed with the reason."""
    return jobs_expire_claims()


@shared_task(acks_late=True, ignore_result=True)
def sweep_unverified_jobs_task() -> int:
    """Beat safety net: succeeded jobs whose verification the broker lost."""
    count = 0
    recent = timezone.now() - timedelta(minutes=10)
    for job in Job.objects.filter(status=Job.SUCCEEDED, finished_at__gte=recent)[:100]:
        if job_announce(job=job) is not None:
            count += 1
    return count
