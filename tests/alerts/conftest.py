"""Runs with samples, a logged-in client, and a loopback webhook receiver.

The personas (owner and teammate of `project`, outsider of `other_project`) come from
tests/conftest.py. Samples go through the storage service
(perfweb.series.services.series_append), the same writes the ingest API makes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from django.test import Client

from perfweb.runs.models import Run
from perfweb.runs.samples import Samples
from perfweb.series.services import series_append
from tests.alerts.receiver import Receiver
from tests.conftest import PASSWORD


def login(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def run_create(
    *,
    project: Any,
    run_id: str = "run-00000001",
    name: str = "resnet50",
    tags: dict[str, str] | None = None,
    started: float | None = None,
    steps: int = 0,
) -> Run:
    started_at = datetime.fromtimestamp(started or time.time() - 3600, tz=UTC)
    return Run.objects.create(
        project=project,
        run_id=run_id,
        name=name,
        host="gpu-node-07",
        started_at=started_at,
        last_seen_at=started_at,
        tags=tags or {},
        step_count=steps,
    )


def samples_add(
    *,
    run: Run,
    name: str,
    values: list[float] | float,
    end: float,
    seconds: float,
    device: str = "gpu:0",
    hz: float = 1.0,
) -> None:
    """`seconds` of 1 Hz samples of `name` ending at `end` (a constant or a list of values)."""
    t = np.arange(end - seconds, end + 1e-9, 1.0 / hz)
    v = np.full(len(t), values, dtype=float) if np.isscalar(values) else np.array(values, float)
    series_append(run=run, samples=[Samples(device=device, name=name, t=t, v=v[: len(t)])])


@pytest.fixture(autouse=True)
def loopback_receivers_allowed(settings: Any) -> None:
    """The test receivers listen on 127.0.0.1, which a real server refuses by default."""
    settings.PERFWEB_ALERT_ALLOWED_NETWORKS = "127.0.0.1/32"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r
