"""The step anatomy on the dashboard: the run header's split and the compare page's diff by
phase, from series sent through the ingest API as an agent sends them."""

from __future__ import annotations

import time
from typing import Any

from django.test import Client

from tests.dashboard.conftest import login, post_json, stream_run

A_PHASES = {"data": 0.2, "forward": 0.1, "backward": 0.1, "optimizer": 0.05, "other": 0.05}
B_PHASES = {**A_PHASES, "optimizer": 0.069, "other": 0.054}  # 23 ms slower, 19 of it optimizer


def send_phased_steps(token: str, run_id: str, phases: dict[str, float], n: int = 30) -> None:
    """A second batch of the run: `n` more steps, each split into `phases`."""
    ts = [time.time() - 3 + i * 0.1 for i in range(n)]
    post_json(
        Client(),
        "/api/v1/ingest/batch",
        token,
        {
            "run_id": run_id,
            "agent_id": f"{run_id}-agent",
            "seq": 1,
            "sent_at": ts[-1],
            "metrics": [
                {"device": "rank:0", "name": f"step.phase.{name}", "t": ts, "v": [seconds] * n}
                for name, seconds in phases.items()
            ],
            "steps": {
                "rank": 0,
                "index": list(range(30, 30 + n)),
                "t": ts,
                "duration": [sum(phases.values())] * n,
                "data_wait": [phases["data"]] * n,
            },
            "facts": {},
            "devices": [],
            "dropped": 0,
        },
    )


def test_the_run_header_shows_where_the_step_goes(client: Client, owner: Any, token: str) -> None:
    stream_run(token, run_id="anatomy-run-a", name="anatomy-a")
    send_phased_steps(token, "anatomy-run-a", A_PHASES)
    page = login(client, owner).get("/runs/anatomy-run-a/").content.decode()
    assert 'data-testid="step-anatomy"' in page
    split = page[page.index('data-testid="step-anatomy"') :]
    assert split.index('data-phase="data"') < split.index('data-phase="forward"')  # 40% first
    assert "<b>data</b> 40%" in split and "<b>optimizer</b> 10%" in split
    mfu = page[page.index('data-testid="mfu"') :]
    assert mfu.startswith('data-testid="mfu" title="no step&#x27;s FLOPs were counted">')


def test_the_run_header_shows_the_mfu_against_the_measured_cpu_peak(
    client: Client, owner: Any, token: str
) -> None:
    stream_run(token, run_id="anatomy-run-mfu", name="mfu")  # 30 steps of 0.5 s
    facts = {"flops.per_step": 2e9, "cpu.peak_flops": 1e10, "cpu.peak_threads": 2}
    post_json(
        Client(),
        "/api/v1/ingest/batch",
        token,
        {
            "run_id": "anatomy-run-mfu",
            "agent_id": "anatomy-run-mfu-agent",
            "seq": 1,
            "sent_at": time.time(),
            "metrics": [],
            "facts": facts,
            "devices": [],
            "dropped": 0,
        },
    )
    page = login(client, owner).get("/runs/anatomy-run-mfu/").content.decode()
    mfu = page[page.index('data-testid="mfu"') :]
    assert '40.0% <span class="muted small">4 GFLOP/s of 10 GFLOP/s</span>' in mfu


def test_the_compare_page_says_which_phase_made_b_slower(
    client: Client, owner: Any, token: str
) -> None:
    for run_id, phases in (("anatomy-run-a", A_PHASES), ("anatomy-run-b", B_PHASES)):
        stream_run(token, run_id=run_id, name=run_id)
        send_phased_steps(token, run_id, phases)
    page = (
        login(client, owner)
        .get("/compare/", {"run": ["anatomy-run-a", "anatomy-run-b"]})
        .content.decode()
    )
    assert 'data-testid="phase-diff"' in page
    assert "step is 23.0 ms slower; 19.0 ms of it is the optimizer." in page
    assert 'data-phase="optimizer"><td>optimizer</td><td class="num delta-up">+19.00 ms' in page
