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
    if only_if_due and not selectors.runs_due_for_diagnosis(run_pk=run.id):
        return
    services.diagnose_run(run=run)


@shared_task(acks_late=True, ignore_result=True)
def diagnose_sweep_task() -> int:
    """Beat: enqueue every run with data its last diagnosis has not seen (a running run at
    most every PERFWEB_DIAGNOSE_INTERVAL s); also the net under any lost message."""
    run_pks = selectors.runs_due_for_diagnosis()
    for run_pk in run_pks:
        diagnose_run_task.delay(run_pk, only_if_due=True)
    uploads.staging_sweep(older_than_s=conf.partial_ttl_s())
    return len(run_pks)
