"""Celery adapters: take ids, re-read state, call one function. Safe to run twice."""

from __future__ import annotations

from celery import shared_task

from perfweb.diagnostics import conf, selectors, services, uploads
from perfweb.runs.models import Run


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=1500, time_limit=1800)
def diagnose_run_task(run_id: int, only_if_due: bool = False) -> None:
    """Diagnose one run (a trace arrived, a fix was measured, beat's sweep). The sweep's
    messages check first that the run is still due: a backlog of them costs no diagnoses."""
    run = Run.objects.filter(id=run_id).first()
    if run is None:  # deleted meanwhile
        return
    services.diagnosis_taken(run_pk=run.id)
    if only_if_due and not selectors.runs_due_for_diagnosis(run_pk=run.id):
        return
    services.diagnose_run(run=run)


@shared_task(acks_late=True, ignore_result=True)
def diagnose_sweep_task() -> int:
    """Beat: enqueue every run with data its last diagnosis has not seen (a running run at
    most every PERFWEB_DIAGNOSE_INTERVAL s), the projects' runs taken in turn, each through
    the coalescing of services.diagnosis_enqueue; also the net under any lost message and
    under requests the project's bound held back. Returns how many were sent."""
    sent = sum(
        services.diagnosis_enqueue(run_pk=run_pk, only_if_due=True)
        for run_pk in selectors.runs_due_for_diagnosis()
    )
    uploads.staging_sweep(older_than_s=conf.partial_ttl_s())
    return sent
