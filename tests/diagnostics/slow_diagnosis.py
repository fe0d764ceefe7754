"""Imported into a test's Celery worker (`-I tests.diagnostics.slow_diagnosis`): each
diagnosis writes this process's pid to $SLOW_DIAGNOSIS_STARTED, then waits while the file
$SLOW_DIAGNOSIS_HOLD exists, so that the test can kill the worker mid-diagnosis."""

from __future__ import annotations

import os
import time
from typing import Any

from celery.signals import task_prerun


@task_prerun.connect
def _hold_diagnoses(**_kwargs: Any) -> None:
    from perfweb.diagnostics import services

    if getattr(services.run_evidence, "held", False):
        return
    real = services.run_evidence

    def held(*, run: Any) -> Any:
        with open(os.environ["SLOW_DIAGNOSIS_STARTED"], "a") as marker:
            marker.write(f"{os.getpid()}\n")
        while os.path.exists(os.environ["SLOW_DIAGNOSIS_HOLD"]):
            time.sleep(0.1)
        return real(run=run)

    held.held = True  # type: ignore[attr-defined]
    services.run_evidence = held
