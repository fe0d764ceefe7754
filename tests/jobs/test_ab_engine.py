"""The A/B engine's plumbing, against a stand-in for `perf-agent attach --offline`."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from perfweb_agent.ab.engine import (
    BASELINE,
    CANDIDATE,
    AbCancelled,
    AbError,
    AbPlan,
    Arm,
    read_step_durations,
    run_ab,
)
from perfweb_contract.ab.results import STOP_DECIDED, STOP_ROUND_LIMIT, STOP_TIME_LIMIT
from perfweb_contract.verdicts import INCONCLUSIVE

FAKE = [sys.executable, str(Path(__file__).with_name("fake_attach.py"))]


def _plan(max_rounds: int = 0, time_budget_s: float = 3600.0, **env: str) -> AbPlan:
    return AbPlan(
        command=["python", "train.py"],
        knobs={"num_workers": 2},
        rounds=3,
        steps=8,
        warmup=2,
        env={**os.environ, **env},
        max_rounds=max_rounds,
        time_budget_s=time_budget_s,
    )


def test_it_interleaves_rounds_and_measures_a_speedup() -> None:
    arms = []
    result = run_ab(_plan(FAKE_STEP_S="0.004", FAKE_SPEEDUP="2"), on_arm=arms.append, launcher=FAKE)
    assert [a.arm for a in arms] == [BASELINE, CANDIDATE, CANDIDATE, BASELINE, BASELINE, CANDIDATE]
    assert [a.round for a in arms] == [1, 1, 2, 2, 3, 3]
    assert all(len(a.step_s) == 10 for a in arms)  # every step run, warm-up included
    assert all(a.to_dict()["warmup_steps"] == 2 for a in arms)  # settled by the 2 minimum
    assert result.verdict == "faster" and 1.8 < result.speedup < 2.2 and result.ci_low > 1
    assert result.loss_parity.note == "loss not visible"
    assert result.stopped == STOP_DECIDED and result.rounds == 3
    assert result.stop_reason == "stopped after 3 rounds: the interval decided (faster)"


def test_it_adds_rounds_while_inconclusive_up_to_the_round_limit() -> None:
    arms: list = []
    noisy = _plan(max_rounds=5, FAKE_STEP_S="0.002", FAKE_BURSTY="1")
    result = run_ab(noisy, on_arm=arms.append, launcher=FAKE)
    assert result.verdict == INCONCLUSIVE, result
    assert result.rounds == 5 and [a.round for a in arms][-2:] == [5, 5]
    assert result.stopped == STOP_ROUND_LIMIT
    assert result.stop_reason == "stopped at the round limit (5) with the interval still too wide"
    assert result.to_dict()["stop_reason"] == result.stop_reason


def test_it_stops_adding_rounds_at_the_time_bound() -> None:
    noisy = _plan(max_rounds=20, time_budget_s=0.01, FAKE_STEP_S="0.002", FAKE_BURSTY="1")
    result = run_ab(noisy, launcher=FAKE)
    assert result.verdict == INCONCLUSIVE and result.rounds == 3  # never fewer than asked
    assert result.stopped == STOP_TIME_LIMIT
    assert result.stop_reason.startswith("stopped at the time bound after 3 of 20 rounds")


def test_it_compares_the_loss_when_the_round_records_it() -> None:
    result = run_ab(_plan(FAKE_LOSS="0.5"), launcher=FAKE)
    assert result.loss_parity.visible and result.loss_parity.within_tolerance


def test_a_failing_workload_is_an_error_with_its_last_line() -> None:
    with pytest.raises(AbError, match="baseline of round 1 exited 3: boom: the workload failed"):
        run_ab(_plan(FAKE_EXIT="3"), launcher=FAKE)


def test_it_refuses_knobs_off_the_closed_list() -> None:
    with pytest.raises(ValueError, match='unknown knob "shell"'):
        AbPlan(command=["python", "x.py"], knobs={"shell": "rm -rf /"})


def test_cancelling_kills_the_workload_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    with pytest.raises(AbCancelled):
        run_ab(_plan(FAKE_HANG="1", FAKE_PIDFILE=str(pidfile)), launcher=FAKE, cancelled=cancel)
    pid = int(pidfile.read_text().split()[0])
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_it_reads_the_lowest_rank_in_step_order(tmp_path: Path) -> None:
    import gzip
    import json

    folder = tmp_path / "run" / "agent"
    folder.mkdir(parents=True)
    for seq, (rank, index, duration) in enumerate([(1, [0], [9.0]), (0, [1, 0], [0.2, 0.1])]):
        body = {"steps": {"rank": rank, "index": index, "duration": duration}}
        with gzip.open(folder / f"batch-{seq:08d}.json.gz", "wt") as handle:
            json.dump(body, handle)
    assert read_step_durations(str(tmp_path)) == [0.1, 0.2]


SAME_OUTPUTS = {
    "top1_agreement": 1.0,
    "max_abs_diff": 0.0,
    "mean_abs_diff": 0.0,
    "max_rel_diff": 0.0,
    "mismatched": 0,
}


def _inference_plan(**env: str) -> AbPlan:
    return AbPlan(
        command=["python", "serve.py"],
        knobs={"quantize": "dynamic"},
        rounds=3,
        steps=8,
        warmup=2,
        env={**os.environ, "FAKE_KIND": "inference", **env},
    )


def test_inference_arms_carry_batch_sizes_memory_kind_and_the_candidates_agreement() -> None:
    arms: list = []
    plan = _inference_plan(FAKE_STEP_S="0.004", FAKE_SPEEDUP="2", FAKE_MEMORY_MB="120")
    result = run_ab(plan, on_arm=arms.append, launcher=FAKE)
    assert [(a.round, a.arm) for a in arms] == [
        (1, BASELINE),
        (1, CANDIDATE),
        (2, CANDIDATE),
        (2, BASELINE),
        (3, BASELINE),
        (3, CANDIDATE),
    ]
    for arm in arms:
        body = arm.to_dict()
        assert body["kind"] == "inference" and body["batch_sizes"] == [8] * 10
        assert body["peak_rss_bytes"] > 120 * 2**20  # the arm's own tree, not a sample of it
        assert body["cuda_max_allocated_bytes"] is None
        assert "captured" not in body and "capture_note" not in body
    for arm in arms:  # the candidate's event, even one that ran first, has the agreement
        outputs = arm.to_dict()["outputs"]
        if arm.arm == BASELINE:
            assert outputs is None
        else:
            assert outputs == {**SAME_OUTPUTS, "samples": 10}
    assert result.kind == "inference" and result.verdict == "faster"
    assert result.agreement.visible and result.agreement.samples == 30
    assert result.candidate_metrics is not None and result.baseline_metrics is not None
    assert result.candidate_metrics.throughput_sps == pytest.approx(
        8 * result.candidate_metrics.throughput_rps
    )


def test_a_faster_candidate_whose_outputs_moved_changes_results() -> None:
    plan = _inference_plan(FAKE_STEP_S="0.004", FAKE_SPEEDUP="2", FAKE_OUTPUT_SHIFT="1.5")
    result = run_ab(plan, launcher=FAKE)
    assert result.speed_verdict == "faster" and result.verdict == "faster but changes results"
    assert result.agreement.top1_agreement == 0.5 and result.agreement.within_tolerance is False


def test_the_agreement_tolerance_is_the_plans() -> None:
    small = {"FAKE_STEP_S": "0.004", "FAKE_SPEEDUP": "2", "FAKE_OUTPUT_SHIFT": "0.001"}
    assert run_ab(_inference_plan(**small), launcher=FAKE).verdict == "faster"  # 1e-3 < 1e-2
    strict = _inference_plan(**small)
    strict.agreement_rtol = 0.0
    result = run_ab(strict, launcher=FAKE)
    assert result.verdict == "faster but changes results" and result.agreement.rel_max == 0.0


def test_an_inference_arm_without_outputs_says_the_agreement_was_not_measured(
    tmp_path: Path,
) -> None:
    result = run_ab(_inference_plan(FAKE_STEP_S="0.002"), launcher=[*FAKE, "--no-outputs"])
    assert not result.agreement.visible
    assert result.agreement.note == "outputs not captured: the arm wrote no output record"


@pytest.mark.parametrize(
    ("top1", "rtol", "message"),
    [
        (1.5, 0.01, "top-1 agreement tolerance must be a number in 0..1"),
        (float("nan"), 0.01, "top-1 agreement tolerance"),
        (0.99, -1.0, "relative tolerance must be a number in 0..1e6"),
        (0.99, True, "relative tolerance"),
    ],
)
def test_it_refuses_a_tolerance_that_means_nothing(top1: float, rtol: float, message: str) -> None:
    with pytest.raises(AbError, match=message):
        AbPlan(
            command=["python", "x.py"],
            knobs={"threads": 2},
            agreement_top1=top1,
            agreement_rtol=rtol,
        )


def test_both_arms_get_the_same_seed_and_only_the_candidate_the_knobs() -> None:
    from perfweb_agent.ab.engine import arm_env

    plan = _inference_plan()
    base = arm_env(plan, arm=BASELINE, loss_file="l", outputs_file="o")
    cand = arm_env(plan, arm=CANDIDATE, loss_file="l", outputs_file="o")
    assert base["PERF_AGENT_AB_SEED"] == cand["PERF_AGENT_AB_SEED"] == "0"
    assert base["PERF_AGENT_AB_OUTPUTS_FILE"] == "o" and "PERF_AGENT_KNOBS" not in base
    assert cand["PERF_AGENT_KNOBS"] == "quantize=dynamic"


def test_perf_agent_ab_states_the_duration_and_the_smallest_effect_after_round_one() -> None:
    from perfweb_agent.cli.ab import plan_sentence

    plan = _plan(max_rounds=20)
    steady = [Arm(round=1, arm=a, step_s=[0.01] * 10, wall_s=6.0, warmup=2) for a in "ab"]
    noisy = [
        Arm(round=1, arm=a, step_s=[0.01 * (1 + i % 4) for i in range(10)], wall_s=6.0, warmup=2)
        for a in "ab"
    ]
    said = plan_sentence(plan, steady)
    assert said.startswith("expected   about 36 s for 3 rounds (12 s a round), up to 4 min 00 s")
    calm = float(said.split("resolve on this host: ")[1].split("%")[0])
    loud = float(plan_sentence(plan, noisy).split("resolve on this host: ")[1].split("%")[0])
    assert 2 <= calm < loud < 100
