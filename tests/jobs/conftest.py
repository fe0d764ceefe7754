"""Fixtures of the jobs tests: a finished run with a recorded command on this host."""

from __future__ import annotations

import socket
from typing import Any

import pytest


@pytest.fixture
def run(project: Any) -> Any:
    from django.utils import timezone

    from perfweb.runs.models import Run

    now = timezone.now()
    return Run.objects.create(
        project=project,
        run_id="run-input-bound-01",
        name="input-bound",
        command=["python", "train.py"],
        cwd="/work/project",
        host=socket.gethostname(),
        status=Run.FINISHED,
        started_at=now,
        last_seen_at=now,
        facts={"host.cpu_count": 4},
    )
