"""Inference rules: each fires on its serving shape and stays quiet on the ones it must not."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence, StepSample
from perfweb_recommender.rules.inference import is_inference
from perfweb_recommender.rules.inference_model import (
    inference_autograd_enabled,
    inference_channels_last,
)
from perfweb_recommender.rules.model import model_quantization

GPU = {"cuda.initialized": True, "cuda.capability": "8.0"}


def _requests(n: int = 40, latency_s: float = 0.004) -> list[StepSample]:
    return [StepSample(0, i, 1000.0 + i * latency_s, latency_s) for i in range(n)]


def _serving(**facts: object) -> RunEvidence:
    base: dict[str, object] = {
        "workload.kind": "inference",
        "steps.source": "module",
        "training.backward": False,
        "model.training": False,
        "inference.grad_enabled": False,
        "model.dtype": "float32",
        "model.linear_param_share": 0.0,
        "model.conv_param_share": 0.0,
        "model.channels_last": False,
        "model.quantized": False,
    }
    base.update(facts)
    return RunEvidence(facts=base, steps=_requests())


def test_it_tells_inference_from_training() -> None:
    assert is_inference(_serving())
    assert not is_inference(_serving(**{"workload.kind": "training"}))
    older_agent = RunEvidence(facts={"training.backward": False, "model.training": False})
    assert is_inference(older_agent)  # eval mode and no backward, without workload.kind
    assert not is_inference(RunEvidence(facts={"training.backward": False}))
    assert not is_inference(RunEvidence())


def test_it_finds_autograd_recording_during_inference() -> None:
    found = inference_autograd_enabled(_serving(**{"inference.grad_enabled": True}))
    assert found is not None and found.risk == "data-path"
    assert found.fix.knob == "inference_mode=true"
    labels = {e.label: e.value for e in found.evidence}
    assert labels["grad enabled in the model's calls"] is True
    assert labels["median request latency"] == 4.0


def test_it_stays_quiet_under_no_grad_or_in_training() -> None:
    assert inference_autograd_enabled(_serving()) is None
    training = _serving(**{"workload.kind": "training", "inference.grad_enabled": True})
    assert inference_autograd_enabled(training) is None
    unknown = _serving()
    del unknown.facts["inference.grad_enabled"]
    assert inference_autograd_enabled(unknown) is None  # no fact: no claim


def test_it_finds_a_conv_net_served_in_nchw() -> None:
    found = inference_channels_last(_serving(**{"model.conv_param_share": 0.97}))
    assert found is not None and found.risk == "operator"
    assert found.fix.knob == "channels_last=true"
    assert "97%" in found.title


def test_it_leaves_channels_last_models_and_mlps_alone() -> None:
    done = _serving(**{"model.conv_param_share": 0.97, "model.channels_last": True})
    assert inference_channels_last(done) is None
    assert inference_channels_last(_serving(**{"model.linear_param_share": 0.99})) is None
    assert inference_channels_last(_serving(**{"model.conv_param_share": 0.1})) is None


def test_it_suggests_int8_for_a_linear_dominated_fp32_model_with_the_accuracy_warning() -> None:
    found = model_quantization(_serving(**{"model.linear_param_share": 0.9}))
    assert found is not None and found.risk == "model"
    assert found.fix.knob == "quantize=dynamic"
    assert "Accuracy warning" in found.fix.text
    assert abs(found.estimated_gain - 0.45) < 1e-9  # 90% Linear x half recovered


def test_it_offers_no_cpu_knob_for_a_gpu_model() -> None:
    evidence = _serving(**{"model.linear_param_share": 0.9, **GPU})
    found = model_quantization(evidence)
    assert found is not None and found.fix.knob is None


def test_it_does_not_quantize_conv_nets_quantized_models_or_training() -> None:
    assert model_quantization(_serving(**{"model.conv_param_share": 0.95})) is None
    quantized = _serving(**{"model.linear_param_share": 0.9, "model.quantized": True})
    assert model_quantization(quantized) is None
    training = _serving(**{"model.linear_param_share": 0.9, "workload.kind": "training"})
    assert model_quantization(training) is None
    int8 = _serving(**{"model.linear_param_share": 0.9, "model.dtype": "qint8"})
    assert model_quantization(int8) is None
