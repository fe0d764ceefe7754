"""Facts about the primary module, read from real CPU models."""

from __future__ import annotations

import pytest

from perfweb_agent.runtime.model_facts import grad_recording, model_facts

torch = pytest.importorskip("torch")


def _mlp() -> object:
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))


def _convnet() -> object:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3),
        torch.nn.BatchNorm2d(32),
        torch.nn.Conv2d(32, 32, 3),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


def test_it_reads_a_linear_dominated_fp32_model() -> None:
    facts = model_facts(torch, _mlp().eval())
    assert facts["model.class"] == "Sequential" and facts["model.training"] is False
    assert facts["model.dtype"] == "float32"
    assert facts["model.parameters"] == 64 * 256 + 256 + 256 * 8 + 8
    assert facts["model.linear_param_share"] == 1.0 and facts["model.conv_param_share"] == 0.0
    assert facts["model.quantized"] is False and "model.channels_last" not in facts


def test_it_reads_a_conv_net_and_its_memory_format() -> None:
    model = _convnet()
    facts = model_facts(torch, model)
    assert facts["model.conv_param_share"] > 0.9 and facts["model.channels_last"] is False
    model.to(memory_format=torch.channels_last)
    assert model_facts(torch, model)["model.channels_last"] is True


def test_it_sees_a_dynamically_quantized_model() -> None:
    quantized = torch.ao.quantization.quantize_dynamic(_mlp().eval(), {torch.nn.Linear})
    assert model_facts(torch, quantized)["model.quantized"] is True


def test_it_tells_whether_an_eval_call_records_autograd() -> None:
    model = _mlp().eval()
    assert grad_recording(torch, model) is True
    with torch.no_grad():
        assert grad_recording(torch, model) is False
    with torch.inference_mode():
        assert grad_recording(torch, model) is False
    assert grad_recording(torch, model.train()) is None  # training: not an inference call


def test_it_gives_no_facts_for_something_it_cannot_read() -> None:
    assert model_facts(torch, object()) == {}


def test_it_counts_a_quantized_models_packed_int8_weights() -> None:
    quantized = torch.ao.quantization.quantize_dynamic(_mlp().eval(), {torch.nn.Linear})
    facts = model_facts(torch, quantized)
    assert facts["model.parameters"] >= 64 * 256 + 256 * 8  # packed weights are no parameters
    assert facts["model.linear_param_share"] > 0.99


def test_it_sees_a_compiled_model() -> None:
    assert model_facts(torch, _mlp())["model.compiled"] is False
    compiled = torch.compile(_mlp())  # wrapping only: nothing compiles before a call
    assert model_facts(torch, compiled)["model.compiled"] is True
