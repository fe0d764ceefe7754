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
    assert (drawn["t"][0], drawn["t"][-1]) == (0.0, 999.0)  # spread over the whole run


def test_a_loop_that_alternates_two_speeds_draws_one_smooth_median() -> None:
    """3 slow steps in every 7 (a DataLoader that keeps up only now and then): windows of a
    few steps made the median jump between the two speeds; 25 steps or more do not."""
    v = np.array([0.8 if i % 7 in (0, 2, 4) else 0.05 for i in range(1000)])
    drawn = band(np.arange(1000, dtype=float), v)
    assert set(drawn["median"]) == {0.05}
    assert min(drawn["p90"]) == pytest.approx(0.8)  # the slow steps stay in the band


def test_a_short_runs_window_is_a_quarter_of_it() -> None:
    from perfweb.diagnostics.step_bands import window_steps

    assert [window_steps(n) for n in (3, 28, 100, 400, 5000)] == [3, 7, 25, 25, 100]


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
    assert len(rank0["median"]) == 300  # 300 points, each the median of 25 steps around it
    assert rank0["window_steps"] == 25
    rows = zip(rank0["p10"], rank0["median"], rank0["p90"], strict=True)
    assert all(lo <= mid <= hi for lo, mid, hi in rows)
    assert 0.045 < float(np.median(rank0["median"])) < 0.055
    other = Client()
    assert other.login(username=outsider.username, password=PASSWORD)
    assert other.get(f"/api/v1/runs/{run.run_id}/steps/bands").status_code == 404
