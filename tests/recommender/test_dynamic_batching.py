"""`inference.dynamic_batching`: requests served one by one while the device idles."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence, Series, StepSample
from perfweb_recommender.rules.inference import inference_dynamic_batching


def _serving(
    *,
    batch: float,
    util: float | None = 15.0,
    cpu: float | None = None,
    kind: str = "inference",
    requests: int = 40,
) -> RunEvidence:
    t = [1000.0 + 0.1 * i for i in range(requests)]
    series = [Series("rank:0", "step.batch_size", t, [batch] * requests)]
    if util is not None:
        series.append(Series("gpu:0", "gpu.utilization", t, [util] * requests))
    if cpu is not None:
        series.append(Series("process", "process.cpu_percent", t, [cpu] * requests))
    steps = [StepSample(0, i, ti, 0.1) for i, ti in enumerate(t)]  # back to back
    facts = {"workload.kind": kind, "steps.source": "module", "host.usable_cores": 8}
    return RunEvidence(facts=facts, series=series, steps=steps)


def test_it_fires_on_requests_of_one_sample_on_an_idle_gpu() -> None:
    found = inference_dynamic_batching(_serving(batch=1.0, util=15.0))
    assert found is not None and found.id == "inference.dynamic_batching"
    assert found.risk == "model"
    numbers = {e.label: e.value for e in found.evidence}
    assert numbers["samples per request (median)"] == 1.0
    assert numbers["requests read (the latest window)"] == 40
    assert numbers["GPU utilisation (median)"] == 0.15
    assert found.estimated_gain == (1 - 0.15) * 0.5


def test_it_reads_the_cpu_of_a_cpu_only_service() -> None:
    found = inference_dynamic_batching(_serving(batch=1.0, util=None, cpu=100.0))
    assert found is not None
    assert {e.label: e.value for e in found.evidence}["CPU used of usable cores"] == 0.125


def test_it_stays_quiet_when_requests_are_already_batched() -> None:
    assert inference_dynamic_batching(_serving(batch=32.0)) is None


def test_it_stays_quiet_when_the_device_is_busy() -> None:
    assert inference_dynamic_batching(_serving(batch=1.0, util=85.0)) is None


def test_it_stays_quiet_on_a_training_run_and_on_too_few_requests() -> None:
    assert inference_dynamic_batching(_serving(batch=1.0, kind="training")) is None
    assert inference_dynamic_batching(_serving(batch=1.0, requests=5)) is None
    assert inference_dynamic_batching(_serving(batch=1.0, util=None)) is None  # nothing measured


def test_it_stays_quiet_when_the_service_waits_for_requests() -> None:
    # 1 ms requests every 100 ms: nothing queues up that a batch could gather.
    evidence = _serving(batch=1.0, util=15.0)
    evidence.steps = [StepSample(0, s.index, s.t, 0.001) for s in evidence.steps]
    assert inference_dynamic_batching(evidence) is None
