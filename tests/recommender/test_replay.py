"""The replay of operator fixes: the run's recorded shapes, run both ways in a helper process
(perfweb_recommender.replay), and the rules that read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfweb_recommender.analysis.summary import summarize
from perfweb_recommender.api import analyze_evidence, analyze_path
from perfweb_recommender.evidence import Replayed, RunEvidence
from perfweb_recommender.replay import conclusive_only, replay_evidence, replay_plan
from perfweb_recommender.replay.plan import plan_from_events, plan_from_file
from perfweb_recommender.rules import diagnose
from perfweb_recommender.trace.loader import load_trace

torch = pytest.importorskip("torch")


class _Net(torch.nn.Module):
    """A conv, two Linear layers and attention written by hand: every replay case."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=1, padding=1)
        self.fc1 = torch.nn.Linear(4 * 6 * 6, 32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.tokens = torch.randn(2, 2, 96, 16)  # attention large enough to be a tenth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(torch.relu(self.conv(x)).flatten(1))
        q = k = v = self.tokens
        scores = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 4.0, -1)
        return self.fc2(h) + torch.matmul(scores, v).mean()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Kineto trace of three forwards, recorded as the agent's windows are (shapes on), on
    one intra-op thread: the count the replay uses for a trace without the run's facts. With
    two, on a busy host every parallel operator waits for its descheduled second thread (a
    conv took 40 ms instead of 0.3) and the attention fell below a tenth of the span."""
    net, x = _Net().eval(), torch.randn(2, 3, 6, 6)
    profile = torch.autograd.profiler.profile(use_cpu=True, use_kineto=True, record_shapes=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with profile:
            for _ in range(3):
                net(x)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("replay") / "rank0-step5-8.pt.trace.json"
    profile.export_chrome_trace(str(path))
    return path


def test_it_reads_the_linear_conv_and_attention_shapes_the_window_recorded(
    recorded: Path,
) -> None:
    plan = plan_from_file(recorded)
    cases = plan["cases"]
    assert sorted(
        (row["x"], row["w"], row["bias"], row["calls"]) for row in cases["linear"]["shapes"]
    ) == [([2, 32], [8, 32], True, 3), ([2, 144], [32, 144], True, 3)]
    assert cases["conv"]["shapes"] == [
        {
            "x": [2, 3, 6, 6],
            "w": [4, 3, 3, 3],
            "bias": True,
            "stride": [1, 1],
            "padding": [1, 1],
            "dilation": [1, 1],
            "groups": 1,
            "calls": 3,
        }
    ]
    assert cases["attention"]["shapes"] == [
        {"q": [2, 2, 96, 16], "k": [2, 2, 96, 16], "v": [2, 2, 96, 16], "calls": 3}
    ]
    assert 0 < cases["linear"]["traced_us"] < plan["span_us"]
    names = [op["name"] for op in cases["ops"]["ops"]]
    assert names.count("aten::linear") == 6 and names.count("aten::conv2d") == 3


def test_a_trace_without_shapes_has_no_plan_and_the_rules_say_so(tmp_path: Path) -> None:
    profile = torch.autograd.profiler.profile(use_cpu=True, use_kineto=True)
    with profile:
        torch.nn.functional.linear(torch.randn(2, 4), torch.randn(3, 4))
    path = tmp_path / "plain.pt.trace.json"
    profile.export_chrome_trace(str(path))
    assert plan_from_file(path) == {}
    evidence = RunEvidence(traces=[summarize(load_trace(path))])
    replay_evidence(evidence)
    assert evidence.replays == {}
    assert evidence.replay_note in (
        "no trace with recorded operator shapes",
        "replay turned off (PERFWEB_REPLAY=0)",
    )
    assert analyze_evidence(evidence, agent_run=False).findings is not None


def test_a_gpu_run_with_shapes_is_not_replayed_and_the_report_says_why(recorded: Path) -> None:
    summary = summarize(load_trace(recorded))
    summary.replay_plan = plan_from_file(recorded)
    evidence = RunEvidence(traces=[summary], facts={"cuda.initialized": True})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERFWEB_REPLAY", "1")
        replay_evidence(evidence)
    assert evidence.replays == {} and "GPU" in evidence.replay_note
    report = analyze_evidence(evidence, agent_run=False)
    assert any(
        note.startswith("operator fixes not replayed: the run used a GPU") for note in report.notes
    )


def test_it_replays_every_case_interleaved_in_a_helper_process(recorded: Path) -> None:
    plan = plan_from_file(recorded)
    replays, note = replay_plan(plan, threads=1, repeats=3, budget_s=0.05)
    assert note == ""
    assert set(replays) == {"linear", "conv", "attention", "ops"}
    for replayed in replays.values():
        assert replayed.pairs >= 2 and replayed.threads == 1
        assert replayed.a_us > 0 and replayed.b_us > 0
        assert replayed.ratio_min <= replayed.ratio <= replayed.ratio_max
        assert 0 < replayed.share <= 1
    assert replays["linear"].calls == 6 and replays["conv"].calls == 3
    assert replays["attention"].calls == 3
    # the recorded list rebuilt: its linear and conv calls at least
    assert replays["ops"].calls >= 9


def _served(**facts: object) -> RunEvidence:
    return RunEvidence(
        facts={
            "workload.kind": "inference",
            "steps.source": "module",
            "inference.grad_enabled": True,
            "model.linear_param_share": 0.9,
            "model.dtype": "float32",
            "model.conv_param_share": 0.5,
            "model.channels_last": False,
            **facts,
        }
    )


def _replayed(
    case: str, ratio: float, share: float = 0.5, spread: tuple[float, float] | None = None
) -> Replayed:
    low, high = spread or (ratio * 0.9, ratio * 1.1)
    return Replayed(
        case=case,
        ratio=ratio,
        ratio_min=low,
        ratio_max=high,
        pairs=5,
        a_us=100.0,
        b_us=100.0 * ratio,
        calls=10,
        share=share,
        threads=1,
    )


def test_the_rules_estimate_from_the_replay_and_list_a_fix_it_measured_slower_as_checked() -> None:
    evidence = _served()
    evidence.replays = {
        "linear": _replayed("linear", 2.0),
        "conv": _replayed("conv", 0.5, share=0.6),
        "ops": _replayed("ops", 0.8, share=0.9),
    }
    found = {f.id: f for f in diagnose(evidence)}
    quantization = found["model.quantization"]
    assert quantization.estimated_gain == 0.0 and quantization.fix.knobs == {}
    assert quantization.gain_basis.startswith("replayed: int8 dynamic is 2.00x slower")
    assert "not recommended" in quantization.gain_basis
    channels_last = found["inference.channels_last"]
    assert channels_last.gain_basis.startswith("replayed: channels_last 2.00x faster")
    assert channels_last.estimated_gain == pytest.approx(0.3)
    assert channels_last.fix.knobs == {"channels_last": True}
    autograd = found["inference.autograd_enabled"]
    assert autograd.estimated_gain == pytest.approx(0.9 * 0.2)
    assert autograd.gain_basis.startswith("replayed: inference_mode")
    # the replayed fixes outrank the one the replay measured slower
    order = [f.id for f in diagnose(evidence)]
    assert order.index("inference.autograd_enabled") < order.index("model.quantization")


def test_a_replay_whose_pairs_disagree_over_a_wide_spread_is_inconclusive() -> None:
    """A busy host measured the autograd case 0.04-13.6x (bench/unseen_plants.py, p5): that
    measures the host. Such a case is dropped with a note, and its rule estimates as without a
    replay; a wide spread that agrees on the direction still counts."""
    noisy = _replayed("ops", 0.98, share=0.6, spread=(0.04, 13.6))
    steady = _replayed("linear", 0.3)
    wide_but_faster = _replayed("conv", 0.4, share=0.6, spread=(0.1, 0.9))
    kept, note = conclusive_only({"ops": noisy, "linear": steady, "conv": wide_but_faster})
    assert set(kept) == {"linear", "conv"}
    assert (
        note == "replay inconclusive on this host for: ops (pair ratios 0.04-13.60x over 5 pairs)"
    )
    evidence = _served()
    evidence.replays = kept
    autograd = next(f for f in diagnose(evidence) if f.id == "inference.autograd_enabled")
    assert autograd.gain_basis.startswith("prior")


def test_without_a_replay_the_rules_fall_back_to_measured_or_prior() -> None:
    found = {f.id: f for f in diagnose(_served())}
    assert found["model.quantization"].gain_basis.startswith("parameters in nn.Linear")
    assert found["inference.channels_last"].gain_basis.startswith("prior")
    assert found["inference.autograd_enabled"].gain_basis.startswith("prior")


def test_analyze_replays_a_recorded_trace_file(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFWEB_REPLAY", "1")
    monkeypatch.setattr("perfweb_recommender.replay.REPEATS", 2)
    monkeypatch.setattr("perfweb_recommender.replay.BUDGET_S", 0.05)
    report = analyze_path(recorded)
    assert not any("not replayed" in note for note in report.notes)
    assert report.traces[0].replay_plan["cases"]["attention"]["traced_us"] > 0
    attention = [f for f in report.findings if f.id == "attention.fused"]
    # a bare trace is no inference run: only the attention case is replayed
    assert attention and attention[0].gain_basis.startswith("replayed: scaled_dot_product")


def test_the_agent_reads_the_main_threads_cpu_and_run_queue_wait_from_schedstat() -> None:
    import os
    import time

    from perfweb_agent.collectors.process import ThreadSched

    sched = ThreadSched(os.getpid())
    assert sched.read() is None  # the first reading is the base
    ran = time.thread_time()
    while time.thread_time() - ran < 0.05:  # 50 ms of CPU on this (the main) thread
        pass
    reading = sched.read()
    assert reading is not None
    on_cpu, waited = reading
    assert on_cpu > 0 and waited >= 0 and on_cpu + waited <= 110  # counters lag a tick


def test_a_busy_hosts_run_queue_wait_is_taken_out_of_the_per_call_cost() -> None:
    from perfweb_recommender.evidence import Series

    evidence = _served()
    assert evidence.run_queue_share() is None
    evidence.series = [
        Series("process", "process.thread_cpu", [1.0, 2.0, 3.0], [20.0, 25.0, 30.0]),
        Series("process", "process.run_queue_wait", [1.0, 2.0, 3.0], [70.0, 75.0, 80.0]),
    ]
    assert evidence.run_queue_share() == pytest.approx(0.75)


def test_a_call_preempted_inside_an_operator_leaves_the_others_shares(recorded: Path) -> None:
    import orjson

    events = orjson.loads(recorded.read_bytes())["traceEvents"]
    plan = plan_from_events(events)
    linear = next(e for e in events if e.get("name") == "aten::linear" and e.get("cat") == "cpu_op")
    waited_us = 40_000.0  # the thread descheduled for 40 ms inside one nn.Linear call
    for event in events:
        if isinstance(event.get("ts"), (int, float)) and event["ts"] > linear["ts"]:
            event["ts"] += waited_us
    linear["dur"] += waited_us
    preempted = plan_from_events(events)
    share = plan["cases"]["attention"]["traced_us"] / plan["span_us"]
    assert preempted["span_us"] < plan["span_us"] + waited_us / 10
    assert preempted["cases"]["attention"]["traced_us"] / preempted["span_us"] > 0.9 * share
    assert preempted["cases"]["linear"]["shapes"] == plan["cases"]["linear"]["shapes"]


def _requests(waits: dict[int, tuple[float, float]]) -> list[dict[str, object]]:
    """A CPU window of 4 like requests, each Linear 100 µs, ReLU 10 µs, Linear 50 µs with
    5 µs between operators; `waits` adds (inside, after) µs to the operator of that index."""
    events: list[dict[str, object]] = []
    now = 0.0
    for index, (name, dur) in enumerate(
        [("aten::linear", 100.0), ("aten::relu", 10.0), ("aten::linear", 50.0)] * 4
    ):
        inside, after = waits.get(index, (0.0, 0.0))
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "ts": now, "dur": dur + inside}
            | {"pid": 1, "tid": 1}
        )
        now += dur + inside + 5.0 + after
    return events


def test_a_wait_inside_one_operator_or_between_two_leaves_the_module_shares(
    tmp_path: Path,
) -> None:
    import orjson

    from perfweb_recommender.analysis.module_time import kind_share, module_time

    def shares(waits: dict[int, tuple[float, float]]) -> dict[str, float]:
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}" / "rank0-step0-4.pt.trace.json"
        path.parent.mkdir()
        path.write_bytes(orjson.dumps({"traceEvents": _requests(waits)}))
        times = module_time(load_trace(path))
        return {"span": times["span_us"], "linear": kind_share(times, "linear") or 0.0}

    quiet = shares({})
    assert quiet == {"span": 4 * 160 + 11 * 5, "linear": pytest.approx(600 / 695)}
    # a neighbour's 5 ms time slice inside one ReLU, and one after another ReLU
    busy = shares({4: (5000.0, 0.0), 7: (0.0, 5000.0)})
    assert busy["span"] == quiet["span"] + 30 + 15  # the ReLU at 4x its 10 µs, the gap at 4x
    assert busy["linear"] == pytest.approx(quiet["linear"], rel=0.07)


def test_a_trace_with_gpu_kernels_is_not_parsed_again_for_a_plan_it_would_never_replay(
    recorded: Path,
) -> None:
    import dataclasses

    from perfweb_recommender.replay.plan import plan_for

    summary = summarize(load_trace(recorded))
    assert plan_for(summary, recorded) == plan_from_file(recorded) != {}
    on_gpu = dataclasses.replace(summary, launch={**summary.launch, "kernels": 12})
    assert plan_for(on_gpu, recorded) == {}  # the same file: its shapes are not read
