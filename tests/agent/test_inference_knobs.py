"""Inference knobs applied by the agent to a real CPU model, without editing the script.

Each probe runs in its own interpreter: the knobs are read from PERF_AGENT_KNOBS at attach
time and take hold of the first outermost module the script calls, as in a real run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfweb_contract import knobs as catalogue
from perfweb_contract.knobs import KnobError

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import copy, json, sys
    from perfweb_agent.ab import knobs
    knobs.apply_from_env()
    import torch
    from perfweb_agent.ab import knobs_torch

    torch.manual_seed(0)
    kind, mode = sys.argv[1], sys.argv[2]
    if kind == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
        )
        inputs = torch.randn(32, 64)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)
        )
        inputs = torch.randn(2, 3, 16, 16)
    if mode == "eval":
        model.eval()
    reference = copy.deepcopy(model)  # built before the first call: the knobs never see it
    seen_formats = []
    first = model[0]
    first.register_forward_pre_hook(
        lambda _m, args: seen_formats.append(
            args[0].is_contiguous(memory_format=torch.channels_last)
        )
    )
    out = model(inputs)
    again = model(inputs)
    expected = reference(inputs)
    from torch._dynamo.utils import counters
    print(json.dumps({
        "status": knobs_torch.status(),
        "compiled_graphs": counters["stats"]["unique_graphs"],
        "layers": [type(layer).__module__ + "." + type(layer).__name__ for layer in model],
        "max_abs_diff": (out.float() - expected).abs().max().item(),
        "scale": expected.abs().max().item(),
        "top1_agreement": (out.argmax(-1) == expected.argmax(-1)).float().mean().item(),
        "requires_grad": out.requires_grad,
        "is_inference": out.is_inference(),
        "grad_enabled_after": torch.is_grad_enabled(),
        "out_dtype": str(out.dtype),
        "stable": bool(torch.equal(out, again)),
        "weight_channels_last": (
            first.weight.is_contiguous(memory_format=torch.channels_last)
            if kind == "conv" else None
        ),
        "input_channels_last": seen_formats,
        "output_channels_last": (
            out.is_contiguous(memory_format=torch.channels_last) if kind == "conv" else None
        ),
    }))
    """
)


def _probe(knob_text: str, kind: str = "mlp", mode: str = "eval") -> dict:
    env = {**os.environ, "PERF_AGENT_KNOBS": knob_text, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, kind, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr  # the agent keeps torch.ao's warning to itself
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_it_accepts_the_inference_knobs_and_nothing_beside_their_closed_values() -> None:
    settings = catalogue.parse_knobs("inference_mode=true,quantize=dynamic,channels_last=1")
    assert settings == {"inference_mode": True, "quantize": "dynamic", "channels_last": True}
    assert catalogue.parse_knobs("compile=default") == {"compile": "default"}
    for bad in ("quantize=static", "quantize=int4", "inference_mode=maybe", "channels_last=2"):
        with pytest.raises(KnobError):
            catalogue.parse_knob(bad)
    assert catalogue.FINDING_KNOBS["model.quantization"] == "quantize"
    assert catalogue.FINDING_KNOBS["inference.autograd_enabled"] == "inference_mode"
    assert catalogue.FINDING_KNOBS["inference.channels_last"] == "channels_last"


def test_it_quantizes_the_linear_layers_and_the_outputs_agree_with_fp32() -> None:
    seen = _probe("quantize=dynamic")
    state = seen["status"]["quantize"]
    assert state == "applied: int8 dynamic quantisation of 2 nn.Linear in Sequential"
    assert seen["layers"][0] == "torch.ao.nn.quantized.dynamic.modules.linear.Linear"
    assert seen["layers"][2] == "torch.ao.nn.quantized.dynamic.modules.linear.Linear"
    assert 0 < seen["max_abs_diff"] <= 2e-2 * seen["scale"]  # int8: close, not bit-identical
    assert seen["top1_agreement"] >= 0.9
    assert seen["stable"]


def test_it_leaves_a_model_in_training_mode_unquantized() -> None:
    seen = _probe("quantize=dynamic", mode="train")
    assert seen["status"]["quantize"].startswith("skipped: Sequential is in training mode")
    assert seen["layers"][0] == "torch.nn.modules.linear.Linear"
    assert seen["max_abs_diff"] == 0


def test_inference_mode_really_turns_autograd_off_for_the_model_in_eval() -> None:
    without = _probe("")
    assert without["requires_grad"] and not without["is_inference"]
    seen = _probe("inference_mode=true")
    assert seen["status"]["inference_mode"] == "applied: inference_mode on Sequential in eval()"
    assert not seen["requires_grad"] and seen["is_inference"]
    assert seen["grad_enabled_after"]  # only the model's forward, not the rest of the script
    assert seen["max_abs_diff"] == 0


def test_inference_mode_keeps_autograd_for_a_model_in_training_mode() -> None:
    seen = _probe("inference_mode=true", mode="train")
    assert seen["requires_grad"] and not seen["is_inference"]


def test_channels_last_really_changes_the_memory_format_of_weights_and_inputs() -> None:
    without = _probe("", kind="conv")
    assert without["weight_channels_last"] is False
    assert without["input_channels_last"] == [False, False]
    seen = _probe("channels_last=true", kind="conv")
    assert seen["status"]["channels_last"] == "applied: channels_last on Sequential"
    assert seen["weight_channels_last"] is True
    assert seen["input_channels_last"] == [True, True]
    assert seen["output_channels_last"] is True
    assert seen["max_abs_diff"] <= 1e-5 * max(seen["scale"], 1.0)


def test_channels_last_skips_a_model_without_convolutions() -> None:
    seen = _probe("channels_last=true")
    assert seen["status"]["channels_last"] == "skipped: Sequential has no 4-D (convolution) weights"


def test_bf16_autocast_and_inference_mode_together_on_cpu() -> None:
    seen = _probe("amp=bf16,inference_mode=true")
    assert seen["status"]["amp"] == "applied: bf16 autocast on Sequential (cpu)"
    assert seen["out_dtype"] == "torch.bfloat16" and seen["is_inference"]
    assert seen["max_abs_diff"] <= 5e-2 * seen["scale"]
    assert seen["top1_agreement"] >= 0.9


def test_compile_default_compiles_the_model_for_inference_on_cpu() -> None:
    seen = _probe("compile=default,inference_mode=true")
    assert seen["status"]["compile"] == "applied: default on Sequential"
    assert seen["compiled_graphs"] >= 1  # inductor compiled it, no silent eager fallback
    assert seen["is_inference"]
    assert seen["max_abs_diff"] <= 1e-4 * max(seen["scale"], 1.0)
