"""A job page says the job's state apart from its verdict, a progress bar that never sits
full while rounds still run, how long the job should take before it starts, and only the
knobs that exist for the run's kind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from perfweb.diagnostics import estimate
from perfweb.jobs.selectors import job_state
from perfweb_contract.knobs import knobs_for
from tests.jobs.test_jobs_server import _claim, _finish, _job, _post_rounds

pytestmark = pytest.mark.django_db


def _with_steps(run: Any, *, startup_s: float, step_s: float, steps: int = 50) -> None:
    """The run's stored steps: the first ends `startup_s + step_s` after the run started."""
    import numpy as np

    from perfweb.runs.samples import Samples
    from perfweb.series.services import series_append

    t0 = run.started_at.timestamp() + startup_s
    ends = np.array([t0 + step_s * (i + 1) for i in range(steps)])
    series_append(
        run=run, samples=[Samples("rank:0", "step.duration", ends, np.full(steps, step_s))]
    )


def test_a_job_that_measured_its_fix_slower_is_done_with_the_verdict_slower(
    owner: Any, run: Any, token: str
) -> None:
    _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.15)
    assert _finish(client, claimed, token).status_code == 200
    browser = Client()
    browser.force_login(owner)
    state = browser.get(f"/jobs/{claimed['id']}.json").json()
    assert (state["status"], state["state"], state["verdict"]) == ("succeeded", "done", "slower")
    page = browser.get(f"/jobs/{claimed['id']}/").content.decode()
    assert 'data-testid="job-status" ' in page and ">done</span>" in page
    assert "succeeded" not in page.split('data-testid="job-status"')[1].split("</span>")[0]
    assert 'data-verdict="slower">slower</strong>' in page


def test_the_progress_bar_is_not_full_while_extra_rounds_run(
    owner: Any, run: Any, token: str
) -> None:
    job = _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.1, rounds=3)
    job.refresh_from_db()
    progress = job_state(job=job)["progress"]
    assert progress["fraction"] == pytest.approx(0.6) and progress["extra_rounds"] is False
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.1, rounds=6)  # past the 5
    progress = job_state(job=job)["progress"]
    assert progress["fraction"] is None and progress["extra_rounds"] is True
    assert progress["text"].startswith("round 6 of at most 20")
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/jobs/{job.id}/").content.decode()
    bar = page.split("<progress")[1].split(">")[0]
    assert "value=" not in bar  # an indeterminate bar: the end is not known


def test_the_expected_duration_is_the_runs_own_start_up_and_step_time() -> None:
    timing = estimate.RunTiming(step_s=0.5, startup_s=4.0, unit="step")
    guess = estimate.job_duration(
        timing=timing, rounds=5, max_rounds=20, steps=20, warmup=3, time_budget_s=1800
    )
    assert guess.arm_s == pytest.approx(4.0 + 23 * 0.5)
    assert guess.expected_s == pytest.approx(5 * 2 * 15.5)
    assert guess.longest_s == pytest.approx(20 * 2 * 15.5)
    sentence = estimate.estimate_sentence(guess)
    assert sentence.startswith(
        "Expected to take about 2 min 35 s for 5 rounds of both arms, 31 s a round"
    )
    assert "up to 10 min if the interval is still too wide" in sentence
    slow = estimate.job_duration(
        timing=timing, rounds=5, max_rounds=20, steps=20, warmup=3, time_budget_s=200
    )
    assert slow.longest_s == pytest.approx(200 + 31.0)  # no round starts past the budget


def test_the_new_job_form_states_the_duration_before_it_starts(owner: Any, run: Any) -> None:
    _with_steps(run, startup_s=6.0, step_s=0.2)
    timing = estimate.run_timing(run=run)
    assert timing is not None
    assert timing.step_s == pytest.approx(0.2) and timing.startup_s == pytest.approx(6.0)
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{run.run_id}/jobs/").content.decode()
    # 5 rounds x 2 arms x (6 s + 23 steps x 0.2 s) = 106 s
    assert "Expected to take about 1 min 46 s for 5 rounds" in page


def test_the_knob_field_offers_the_knobs_of_an_inference_run_on_a_cpu(owner: Any, run: Any) -> None:
    run.facts = {**run.facts, "workload.kind": "inference", "cuda.available": False}
    run.save(update_fields=["facts"])
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{run.run_id}/jobs/").content.decode()
    listed = page.split('data-testid="knob-list"')[1]
    assert "<code>quantize=dynamic</code>" in listed and "inference_mode=true|false" in listed
    assert "pin_memory" not in listed and "cudnn_benchmark" not in listed
    assert 'placeholder="num_workers=4"' in page  # the first knob of an inference run


def test_the_knob_catalogue_says_where_each_knob_can_change_something() -> None:
    training_cpu = {k.name for k in knobs_for(kind="training", cuda=False)}
    assert "quantize" not in training_cpu and "amp" not in training_cpu
    assert {"num_workers", "threads"} <= training_cpu
    assert "amp" in {k.name for k in knobs_for(kind="training", cuda=True)}
    assert {"quantize", "channels_last"} <= {k.name for k in knobs_for(kind=None, cuda=True)}


def test_a_finished_job_says_how_long_it_took(owner: Any, run: Any, token: str) -> None:
    _with_steps(run, startup_s=2.0, step_s=0.1)
    job = _job(owner, run)
    client = Client()
    claimed = _claim(client, token, run.host)
    _post_rounds(client, claimed, token, base_s=0.1, cand_s=0.05)
    assert _finish(client, claimed, token).status_code == 200
    job.refresh_from_db()
    job.finished_at = job.created_at + timedelta(seconds=75)
    job.save(update_fields=["finished_at"])
    duration = job_state(job=job)["duration"]
    assert duration["took_s"] == pytest.approx(75) and duration["expected_s"] > 0


def _with_noisy_steps(run: Any, *, step_s: float, spread: float, steps: int = 200) -> None:
    """Steps of `step_s` on a host that spreads them by `spread` (seeded)."""
    import random

    import numpy as np

    from perfweb.runs.samples import Samples
    from perfweb.series.services import series_append

    rng = random.Random(5)
    values = np.array([step_s * rng.uniform(1 - spread, 1 + spread) for _ in range(steps)])
    ends = run.started_at.timestamp() + 2.0 + np.cumsum(values)
    series_append(run=run, samples=[Samples("rank:0", "step.duration", ends, values)])


def test_the_job_states_the_smallest_effect_it_can_resolve_at_the_runs_own_noise() -> None:
    quiet = estimate.RunTiming(step_s=0.1, startup_s=2.0, unit="step", steps=(0.1,) * 50)
    busy = estimate.RunTiming(
        step_s=0.1, startup_s=2.0, unit="step", steps=tuple(0.1 * (1 + (i % 5)) for i in range(50))
    )
    sizes = {"rounds": 5, "max_rounds": 20, "steps": 20, "warmup": 3, "time_budget_s": 1800}
    calm, loud = (
        estimate.job_duration(timing=quiet, **sizes),
        estimate.job_duration(timing=busy, **sizes),
    )
    assert 0.02 <= calm.resolvable_effect < loud.resolvable_effect < 1.0
    assert f"resolve on this host: {calm.resolvable_effect:.0%} of step time" in (
        estimate.estimate_sentence(calm)
    )
    short = estimate.job_duration(timing=quiet, **{**sizes, "max_rounds": 2, "rounds": 2})
    assert short.resolvable_effect == 1.0  # 2 rounds decide nothing
    assert "no effect can be resolved" in estimate.estimate_sentence(short)


def test_try_this_fix_is_not_offered_for_an_estimate_below_what_a_job_can_resolve(
    owner: Any, run: Any
) -> None:
    from django.template.loader import render_to_string

    from perfweb.diagnostics.estimate import try_fix_refusals

    _with_noisy_steps(run, step_s=0.05, spread=0.5)
    refusals = try_fix_refusals(run=run, gains={"tiny": 0.018, "large": 0.5, "none": None})
    assert refusals["large"] == "" and refusals["none"] == ""
    assert refusals["tiny"].startswith("Not offered: the estimate (1.8%) is below the smallest")
    html = render_to_string(
        "jobs/_try_fix.html",
        {
            "run_id": run.run_id,
            "finding_id": "x",
            "knob": "num_workers=4",
            "refused": refusals["tiny"],
        },
    )
    assert "Try this fix" not in html and "Not offered: the estimate (1.8%)" in html
    offered = render_to_string(
        "jobs/_try_fix.html", {"run_id": run.run_id, "finding_id": "x", "knob": "num_workers=4"}
    )
    assert "Try this fix" in offered
