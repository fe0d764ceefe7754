"""Runs of one job keep a baseline; a run slower than it beyond the noise gets a
`run.regression` finding linked to the comparison page, which puts two runs side by side."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.test import Client

from perfweb.diagnostics.comparison import baseline_for
from perfweb.diagnostics.models import Finding
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.runs.models import Run
from tests.conftest import PASSWORD
from tests.server.agent_client import T0, Agent

from .conftest import trace_bytes, upload

pytestmark = pytest.mark.django_db


def logged_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def job_run(
    token: str, *, number: int, median_s: float, name: str = "train-resnet", seed: int = 0,
    steps: int = 200, facts: dict[str, Any] | None = None, tags: dict[str, Any] | None = None,
) -> Run:  # fmt: skip
    """A started run of `steps` steps with 5 % lognormal noise around `median_s`."""
    agent = Agent(token, run_id=f"{number:032x}", agent_id=f"{number + 100:032x}")
    start = T0 + 3600 * number
    body_tags = {"team": "vision", **(tags or {})}
    assert agent.start(name=name, started_at=start, tags=body_tags).status_code == 200
    durations = median_s * np.exp(np.random.default_rng(seed).normal(0, 0.05, size=steps))
    ends = start + np.cumsum(durations)
    for first in range(0, steps, 50):
        part = slice(first, min(steps, first + 50))
        response = agent.batch(
            metrics=[
                {
                    "device": "process",
                    "name": "process.cpu_percent",
                    "t": ends[part].tolist(),
                    "v": [90.0] * len(ends[part]),
                }
            ],
            steps={
                "rank": 0,
                "index": list(range(first, part.stop)),
                "t": ends[part].tolist(),
                "duration": durations[part].tolist(),
                "data_wait": (0.1 * durations[part]).tolist(),
            },
            facts=facts or {"dataloader.0.num_workers": 4, "torch.num_threads": 8},
            devices=[],
        )
        assert response.status_code == 200, response.content
    return Run.objects.get(run_id=agent.run_id)


def _regression(run: Run) -> Finding | None:
    diagnose_run_task(run.id)
    return Finding.objects.filter(run=run, rule_id="run.regression").first()


def test_it_flags_a_run_ten_percent_slower_than_its_job_baseline(token: str) -> None:
    base = job_run(token, number=1, median_s=0.050, seed=1)
    slow = job_run(token, number=2, median_s=0.055, seed=2)
    found = _regression(slow)
    assert found is not None
    assert found.title.startswith(f"Regressed vs run {base.run_id[:12]}")
    assert f"/compare/?run={base.run_id}&run={slow.run_id}" in found.fix["text"]
    assert "slower than" in found.fix["text"]
    ratio_low = next(e["value"] for e in found.evidence if e["label"].endswith("interval low"))
    assert 1.02 < ratio_low < 1.10


def test_it_does_not_flag_a_run_within_the_noise(token: str) -> None:
    job_run(token, number=1, median_s=0.050, seed=1)
    same = job_run(token, number=2, median_s=0.050, seed=2)
    assert _regression(same) is None


def test_it_compares_only_runs_of_the_same_job(token: str) -> None:
    job_run(token, number=1, median_s=0.050, seed=1, name="other-job")
    slow = job_run(token, number=2, median_s=0.080, seed=2)
    assert baseline_for(run=slow) is None
    assert _regression(slow) is None


def test_a_job_tag_makes_runs_of_other_names_one_job(token: str) -> None:
    base = job_run(token, number=1, median_s=0.050, seed=1, name="a", tags={"job": "nightly"})
    slow = job_run(token, number=2, median_s=0.060, seed=2, name="b", tags={"job": "nightly"})
    assert baseline_for(run=slow) == base
    assert _regression(slow) is not None


def test_a_regressed_run_does_not_become_the_baseline(token: str) -> None:
    good = job_run(token, number=1, median_s=0.050, seed=1)
    slow = job_run(token, number=2, median_s=0.060, seed=2)
    assert _regression(slow) is not None
    later = job_run(token, number=3, median_s=0.060, seed=3)
    assert baseline_for(run=later) == good
    assert _regression(later) is not None


def test_the_comparison_page_names_the_fact_that_differs(token: str, owner: Any) -> None:
    base = job_run(
        token,
        number=1,
        median_s=0.050,
        seed=1,
        facts={"dataloader.0.num_workers": 4, "torch.num_threads": 8},
    )
    slow = job_run(
        token,
        number=2,
        median_s=0.065,
        seed=2,
        facts={"dataloader.0.num_workers": 0, "torch.num_threads": 8},
    )
    diagnose_run_task(base.id)
    diagnose_run_task(slow.id)
    page = logged_in(owner).get(f"/compare/?run={slow.run_id}&run={base.run_id}")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-fact="dataloader.0.num_workers"' in html
    assert 'data-fact="torch.num_threads"' not in html
    assert "% slower than train-resnet (" in html  # A is the earlier run whatever the order
    assert 'data-appeared="run.regression"' in html
    assert 'data-testid="step-distribution"' in html and 'data-testid="metric-overlays"' in html


def test_a_run_five_times_as_fast_reads_as_a_speed_up_and_names_its_knob(
    token: str, owner: Any
) -> None:
    """B's step is 80% shorter: "4.9× faster" (a speed-up), never "80% faster"; and B was
    the candidate of a job, so the page says the agent applied a knob to it."""
    base = job_run(token, number=1, median_s=0.100, seed=1, facts={"dataloader.0.num_workers": 0})
    fast = job_run(
        token,
        number=2,
        median_s=0.0205,
        seed=2,
        facts={"dataloader.0.num_workers": 0, "ab.knobs": "num_workers=4"},
    )
    html = logged_in(owner).get(f"/compare/?run={base.run_id}&run={fast.run_id}").content.decode()
    sentence = html.split('data-testid="compare-sentence">')[1].split("</p>")[0]
    assert "× faster (" in sentence and "% less time)" in sentence, sentence
    assert "80% faster" not in html
    knobs = html.split('data-testid="compare-knobs">')[1].split("</p>")[0]
    assert knobs.startswith("Run B had a knob applied by the agent: <code>num_workers=4</code>")


def test_the_comparison_page_diffs_the_traces_of_both_runs(token: str, owner: Any) -> None:
    base = job_run(token, number=1, median_s=0.050, seed=1)
    slow = job_run(token, number=2, median_s=0.050, seed=2)
    for run, extra_us in ((base, 0), (slow, 400)):
        events = [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#1",
                "ts": 0,
                "dur": 2000,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::copy_",
                "ts": 10,
                "dur": 100 + extra_us,
                "pid": 1,
                "tid": 1,
            },
        ]
        agent = Agent(token, run_id=run.run_id, agent_id=run.processes.get().agent_id)
        assert all(r.status_code == 200 for r in upload(agent, trace_bytes(events)))
        diagnose_run_task(run.id)
    html = logged_in(owner).get(f"/compare/?run={base.run_id}&run={slow.run_id}").content.decode()
    assert 'data-testid="trace-diff"' in html
    assert 'data-op="aten::copy_" data-change="slower"' in html


def test_the_comparison_page_is_scoped_and_checks_its_input(
    token: str, other_token: str, owner: Any, outsider: Any
) -> None:
    mine = job_run(token, number=1, median_s=0.05)
    theirs = job_run(other_token, number=2, median_s=0.05)
    client = logged_in(owner)
    assert client.get(f"/compare/?run={mine.run_id}&run={theirs.run_id}").status_code == 404
    one = client.get(f"/compare/?run={mine.run_id}")
    assert one.status_code == 400 and "Pick between 2 and 4 runs" in one.content.decode()
    assert (
        logged_in(outsider).get(f"/compare/?run={mine.run_id}&run={theirs.run_id}").status_code
        == 404
    )
    assert Client().get(f"/compare/?run={mine.run_id}&run={theirs.run_id}").status_code == 302


def test_the_runs_list_lets_one_pick_runs_to_compare(token: str, owner: Any) -> None:
    run = job_run(token, number=1, median_s=0.05, steps=40)
    html = logged_in(owner).get("/").content.decode()
    assert 'action="/compare/"' in html
    assert f'name="run" value="{run.run_id}" form="compare-form"' in html
