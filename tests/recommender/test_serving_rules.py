"""The inference doctor's measured estimates, its GPU-only advice and its model-class
suggestions, on injected evidence (CPU traces summarised as the agent's windows are; CUDA
facts as an attached GPU server reports them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from perfweb_recommender.evidence import RunEvidence, Series, StepSample
from perfweb_recommender.rules.base import rank_findings
from perfweb_recommender.rules.cudnn import cudnn_benchmark
from perfweb_recommender.rules.inference import inference_dynamic_batching
from perfweb_recommender.rules.inference_model import (
    AUTOGRAD_US_PER_OP,
    CHANNELS_LAST_RECOVERABLE,
    inference_autograd_enabled,
    inference_channels_last,
)
from perfweb_recommender.rules.launch import launch_overhead
from perfweb_recommender.rules.model import model_distillation, model_pruning, model_quantization
from perfweb_recommender.rules.precision import precision_amp

WINDOW = "/run/agent/traces/rank0-step20-25.pt.trace.json.gz"  # 5 requests
CUDA = {"cuda.initialized": True, "cuda.device_count": 1, "cuda.capability": "8.0"}


def _requests(
    n: int = 40, latency_s: float = 0.0003, sizes: list[float] | None = None
) -> tuple[list[StepSample], list[Series]]:
    steps = [StepSample(0, i, 1000.0 + (i + 1) * latency_s, latency_s) for i in range(n)]
    batch = sizes or [1.0] * n
    return steps, [Series("rank:0", "step.batch_size", [s.t for s in steps], batch)]


def _cpu_trace(make: Callable[..., Any], **times: float) -> Any:
    module_time = {
        "span_us": 5_000.0,
        "top_level_ops": 135.0,
        "top_level_us": 4_000.0,
        "autograd_ops": 125.0,
        "linear_us": 0.0,
        "linear_calls": 0.0,
        "conv_us": 0.0,
        "conv_calls": 0.0,
    }
    module_time.update(times)
    return make(source=WINDOW, launch={"kernels": 0}, module_time=module_time)


def _server(**facts: object) -> RunEvidence:
    base: dict[str, object] = {
        "workload.kind": "inference",
        "steps.source": "module",
        "inference.grad_enabled": False,
        "model.dtype": "float32",
        "model.linear_param_share": 0.0,
        "model.conv_param_share": 0.0,
        "model.channels_last": False,
        "model.quantized": False,
        "cudnn.benchmark": False,
    }
    base.update(facts)
    steps, series = _requests()
    return RunEvidence(facts=base, steps=steps, series=series)


# -- measured, not prior, where a measurement exists ------------------------------------


def test_autograd_cost_is_counted_from_the_traced_operators(make_summary) -> None:  # noqa: ANN001
    evidence = _server(**{"inference.grad_enabled": True})
    evidence.traces = [_cpu_trace(make_summary)]
    found = inference_autograd_enabled(evidence)
    assert found is not None and not found.prior
    assert found.gain_basis.startswith("measured: 25 operators per request")
    assert found.estimated_gain == pytest.approx(25 * AUTOGRAD_US_PER_OP * 1e-6 / 0.0003)


def test_autograd_cost_stays_a_prior_without_a_trace() -> None:
    found = inference_autograd_enabled(_server(**{"inference.grad_enabled": True}))
    assert found is not None and found.prior and found.estimated_gain == 0.05


def test_int8_is_suggested_from_the_measured_linear_share(make_summary) -> None:  # noqa: ANN001
    evidence = _server(**{"model.linear_param_share": 1.0})
    evidence.steps, evidence.series = _requests(latency_s=0.005)  # unprofiled: same as traced
    evidence.traces = [_cpu_trace(make_summary, linear_us=4_500.0, linear_calls=20.0)]
    found = model_quantization(evidence)
    assert found is not None and found.gain_basis.startswith("measured")
    assert found.estimated_gain == pytest.approx(0.9 * 0.5)
    assert {e.label: e.value for e in found.evidence}["time per nn.Linear call"] == 225.0


def test_int8_is_not_suggested_for_linear_calls_too_small_to_gain(make_summary) -> None:  # noqa: ANN001
    evidence = _server(**{"model.linear_param_share": 1.0})
    # 45 calls of 35 µs traced; requests take 0.3 ms outside the profiler against 1 ms
    # traced: 10.5 µs per call, where int8's per-call quantisation costs more than it saves
    evidence.traces = [_cpu_trace(make_summary, linear_us=1_575.0, linear_calls=45.0)]
    assert model_quantization(evidence) is None


def test_channels_last_gain_comes_from_the_convolutions_traced_share(make_summary) -> None:  # noqa: ANN001
    evidence = _server(**{"model.conv_param_share": 0.99})
    evidence.traces = [_cpu_trace(make_summary, conv_us=3_000.0, conv_calls=20.0)]
    found = inference_channels_last(evidence)
    assert found is not None and found.gain_basis.startswith("measured")
    assert found.estimated_gain == pytest.approx(0.6 * CHANNELS_LAST_RECOVERABLE)
    no_trace = inference_channels_last(_server(**{"model.conv_param_share": 0.99}))
    assert no_trace is not None and no_trace.prior


def test_batching_gain_is_fitted_when_requests_of_several_sizes_were_seen() -> None:
    sizes = [1.0, 2.0] * 20
    steps = [StepSample(0, i, 1000.0 + i * 0.01, 0.001 + 0.0001 * s) for i, s in
             enumerate(sizes)]  # fmt: skip  # 1 ms per call + 0.1 ms per sample, back to back
    steps = [
        StepSample(0, i, sum(x.duration_s for x in steps[: i + 1]) + 1000.0, s.duration_s)
        for i, s in enumerate(steps)
    ]
    evidence = _server()
    evidence.steps = steps
    evidence.series = [Series("rank:0", "step.batch_size", [s.t for s in steps], sizes)]
    found = inference_dynamic_batching(evidence)
    assert found is not None and found.gain_basis.startswith("measured: latency fitted")
    # per sample: (1 + 0.1 x 1.5) / 1.5 ms now, (1 + 0.1 x 8) / 8 ms at a batch of 8
    assert found.estimated_gain == pytest.approx(1 - (1.8 / 8) / (1.15 / 1.5), rel=1e-3)
    labels = {e.label: e.value for e in found.evidence}
    assert labels["fixed latency per call (fit)"] == pytest.approx(1.0, rel=1e-3)


def test_batching_gain_is_read_from_the_trace_of_batch_of_one_requests(make_summary) -> None:  # noqa: ANN001
    def traced(top_level_us: float) -> list[Any]:
        """A 5 ms traced span of 35 top-level operators taking `top_level_us` of it."""
        return [
            _cpu_trace(
                make_summary,
                top_level_ops=35.0,
                top_level_us=top_level_us,
                linear_us=2_000.0,
                linear_calls=15.0,
            )
        ]

    evidence = _server()
    evidence.steps, evidence.series = _requests(latency_s=0.0001)
    evidence.traces = traced(3_000.0)
    found = inference_dynamic_batching(evidence)
    assert found is not None and found.gain_basis.startswith("measured: per-call cost")
    fixed = (1 - 3_000 / 5_000) + 7 * 5e-6 / 0.0001  # Python between operators + dispatch
    assert found.estimated_gain == pytest.approx(min(0.9, fixed) * (1 - 1 / 8))
    assert "waits" in found.fix.text  # the latency side of the trade-off
    # Almost no Python between the operators: the estimate rests on the dispatch constant,
    # and says it is a prior (it never outranks a measurement).
    evidence.traces = traced(4_950.0)
    found = inference_dynamic_batching(evidence)
    assert found is not None and found.prior
    assert found.gain_basis.startswith("prior: per-call cost")


def test_batching_is_not_suggested_to_a_server_that_waits_for_requests() -> None:
    evidence = _server()
    evidence.steps = [StepSample(0, i, 1000.0 + i * 0.1, 0.001) for i in range(40)]
    assert inference_dynamic_batching(evidence) is None


# -- GPU-only advice: never on a CPU, from injected CUDA facts on a GPU --------------------


def _conv_server(**facts: object) -> RunEvidence:
    return _server(**{"model.conv_param_share": 0.95, "inference.input_shapes": "fixed", **facts})


def test_cudnn_benchmark_is_advised_for_a_fixed_shape_conv_net_on_cuda() -> None:
    found = cudnn_benchmark(_conv_server(**CUDA))
    assert found is not None and found.fix.knob == "cudnn_benchmark=true"
    assert {e.label: e.value for e in found.evidence}["input shapes of the model's calls"] == (
        "fixed"
    )


def test_cudnn_benchmark_is_never_advised_on_a_cpu_or_for_varying_shapes(make_summary) -> None:  # noqa: ANN001
    assert cudnn_benchmark(_conv_server()) is None  # CPU: cuDNN does not run there
    cpu_trace = _conv_server()
    cpu_trace.traces = [_cpu_trace(make_summary, conv_us=4_000.0, conv_calls=20.0)]
    assert cudnn_benchmark(cpu_trace) is None
    assert cudnn_benchmark(_conv_server(**CUDA, **{"inference.input_shapes": "varying"})) is None
    assert cudnn_benchmark(_conv_server(**CUDA, **{"cudnn.benchmark": True})) is None


def test_fp32_gpu_inference_is_told_to_autocast_bf16_or_fp16_by_capability() -> None:
    ampere = precision_amp(_server(**{"model.linear_param_share": 0.9, **CUDA}))
    assert ampere is not None and ampere.fix.knob == "amp=bf16" and ampere.prior
    volta = precision_amp(
        _server(**{"model.linear_param_share": 0.9, **CUDA, "cuda.capability": "7.0"})
    )
    assert volta is not None and "float16" in volta.fix.snippet and volta.fix.knob is None
    assert precision_amp(_server(**{"model.linear_param_share": 0.9})) is None  # CPU
    autocast = _server(**{"model.linear_param_share": 0.9, **CUDA, "amp.autocast": True})
    assert precision_amp(autocast) is None


def test_small_gpu_requests_on_an_idle_gpu_are_told_to_use_cuda_graphs() -> None:
    evidence = _server(**CUDA)
    evidence.series.append(Series("gpu:0", "gpu.utilization", [1000.0] * 10, [20.0] * 10))
    found = launch_overhead(evidence)
    assert found is not None and found.fix.knob == "compile=reduce-overhead"
    assert found.estimated_gain == pytest.approx(0.8 * 0.7)
    busy = _server(**CUDA)
    busy.series.append(Series("gpu:0", "gpu.utilization", [1000.0] * 10, [90.0] * 10))
    assert launch_overhead(busy) is None
    assert launch_overhead(_server()) is None  # a CPU server has no CUDA Graphs


# -- pruning and distillation: suggestions, after the cheaper fixes -------------------------

LARGE_INT8 = {
    "model.parameters": 6_000_000,
    "model.linear_param_share": 1.0,
    "model.quantized": True,
}


def test_a_large_quantised_model_still_bound_by_its_layers_gets_both_suggestions(
    make_summary,  # noqa: ANN001
) -> None:
    evidence = _server(**LARGE_INT8)
    evidence.traces = [_cpu_trace(make_summary, linear_us=4_000.0, linear_calls=20.0)]
    pruning, distillation = model_pruning(evidence), model_distillation(evidence)
    assert pruning is not None and distillation is not None
    for found in (pruning, distillation):
        assert found.risk == "model" and found.fix.knob is None and found.prior
        assert "Accuracy warning" in found.fix.text
    assert "20%" in pruning.fix.text and pruning.estimated_gain == pytest.approx(0.8 * 0.2)
    assert "2-5" in distillation.fix.text and distillation.estimated_gain == pytest.approx(0.4)


def test_pruning_and_distillation_stay_quiet_until_the_cheaper_fixes_are_done(
    make_summary,  # noqa: ANN001
) -> None:
    fp32 = _server(**{**LARGE_INT8, "model.quantized": False})
    small = _server(**{**LARGE_INT8, "model.parameters": 100_000})
    waiting = _server(**LARGE_INT8)
    waiting.steps = [StepSample(0, i, 1000.0 + i * 0.1, 0.001) for i in range(40)]
    elsewhere = _server(**LARGE_INT8)  # the trace shows the time is not in the layers
    elsewhere.traces = [_cpu_trace(make_summary, linear_us=500.0, linear_calls=20.0)]
    for evidence in (fp32, small, waiting, elsewhere):
        assert model_pruning(evidence) is None and model_distillation(evidence) is None
    compiled = _server(**{**LARGE_INT8, "model.quantized": False, "model.compiled": True})
    assert model_pruning(compiled) is not None


def test_model_suggestions_rank_after_data_path_and_operator_fixes_of_similar_size() -> None:
    evidence = _server(
        **{**LARGE_INT8, "inference.grad_enabled": True, "model.conv_param_share": 0.6}
    )
    autograd = inference_autograd_enabled(evidence)
    channels_last = inference_channels_last(evidence)
    pruning, distillation = model_pruning(evidence), model_distillation(evidence)
    assert autograd and channels_last and pruning and distillation
    for suggestion in (pruning, distillation):  # even twice as large as the others
        suggestion.estimated_gain = 2 * max(autograd.estimated_gain, channels_last.estimated_gain)
    ranked = [f.id for f in rank_findings([distillation, pruning, channels_last, autograd])]
    assert set(ranked[:2]) == {"inference.channels_last", "inference.autograd_enabled"}
    assert set(ranked[2:]) == {"model.pruning", "model.distillation"}
