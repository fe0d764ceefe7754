"""Step time as a rolling median with its p10–p90 band, from the raw steps, per rank."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.test import Client

from perfweb.diagnostics.step_bands import band
from tests.conftest import PASSWORD

from .test_comparison import job_run

pytestmark = pytest.mark.django_db


def test_it_draws_through_the_outliers_not_to_them() -> None:
    v = np.full(1000, 0.035)
    v[::50] = 3.0  # one step in 50 takes 3 s (a checkpoint, a GC pause)
    t = np.arange(1000, dtype=float)
    drawn = band(t, v, bands=20)
    assert len(drawn["t"]) == 20
    assert max(drawn["median"]) == pytest.approx(0.035)  # the barcode's peaks are gone
    assert max(drawn["p90"]) == pytest.approx(0.035)
    assert drawn["t"][0] == pytest.approx(24.0)  # the window's middle step


def test_it_follows_a_real_slowdown() -> None:
    v = np.concatenate([np.full(500, 0.035), np.full(500, 0.070)])
    drawn = band(np.arange(1000, dtype=float), v, bands=10)
    assert drawn["median"][:5] == pytest.approx([0.035] * 5)
    assert drawn["median"][5:] == pytest.approx([0.070] * 5)


def test_it_serves_the_band_of_each_rank_to_the_project_only(
    token: str, owner: Any, outsider: Any
) -> None:
    run = job_run(token, number=1, median_s=0.05, steps=400)
    client = Client()
    assert client.login(username=owner.username, password=PASSWORD)
    body = client.get(f"/api/v1/runs/{run.run_id}/steps/bands").json()
    (rank0,) = body["bands"]
    assert rank0["device"] == "rank:0" and rank0["raw_count"] == 400 and rank0["from_raw"]
    assert len(rank0["median"]) == 80  # 400 steps, at least 5 a window
    rows = zip(rank0["p10"], rank0["median"], rank0["p90"], strict=True)
    assert all(lo <= mid <= hi for lo, mid, hi in rows)
    assert 0.045 < float(np.median(rank0["median"])) < 0.055
    other = Client()
    assert other.login(username=outsider.username, password=PASSWORD)
    assert other.get(f"/api/v1/runs/{run.run_id}/steps/bands").status_code == 404
