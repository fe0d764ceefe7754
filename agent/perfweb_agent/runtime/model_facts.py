"""Facts about the primary outermost module, for the inference rules.

Read once, when the module becomes the primary (a walk over its modules and parameters,
no forward, no copies), plus one flag per call: whether autograd was recording while the
model served in eval mode. Never raises: a model it cannot read gives no facts.
"""

from __future__ import annotations

from typing import Any


def model_facts(torch: Any, module: Any) -> dict[str, Any]:
    """`model.*` facts: class, dtype, parameter shares of nn.Linear and convolutions, format."""
    try:
        return _model_facts(torch, module)
    except Exception:  # noqa: BLE001 - the agent never raises into the script
        return {}


def _model_facts(torch: Any, module: Any) -> dict[str, Any]:
    nn = torch.nn
    total = linear = conv = 0
    conv_weights: list[Any] = []
    quantized = False
    for sub in module.modules():
        kind = type(sub)
        own = sum(p.numel() for p in sub.parameters(recurse=False))
        if "quantized" in kind.__module__:
            quantized = True
            own += _packed_weight_numel(sub)  # packed int8 weights are no parameters
        total += own
        if kind is nn.Linear or ("quantized" in kind.__module__ and kind.__name__ == "Linear"):
            linear += own
        elif isinstance(sub, nn.modules.conv._ConvNd):
            conv += own
            if sub.weight.dim() == 4:
                conv_weights.append(sub.weight)
    facts: dict[str, Any] = {
        "model.class": type(module).__name__,
        "model.training": bool(module.training),
        "model.parameters": total,
        "model.quantized": quantized,
        "model.compiled": type(module).__name__ == "OptimizedModule",  # torch.compile's wrapper
    }
    first = next(iter(module.parameters()), None)
    if first is not None:
        facts["model.dtype"] = str(first.dtype).removeprefix("torch.")
    if total:
        facts["model.linear_param_share"] = round(linear / total, 4)
        facts["model.conv_param_share"] = round(conv / total, 4)
    if conv_weights:
        facts["model.channels_last"] = all(
            w.is_contiguous(memory_format=torch.channels_last) for w in conv_weights
        )
    return facts


def _packed_weight_numel(module: Any) -> int:
    """Elements of a quantised module's packed weight (`weight()` on torch.ao's modules)."""
    weight = getattr(module, "weight", None)
    if not callable(weight):
        return 0
    try:
        return int(weight().numel())
    except Exception:  # noqa: BLE001 - a module without a readable packed weight
        return 0


def grad_recording(torch: Any, module: Any) -> bool | None:
    """True when an eval-mode call records autograd, False when it does not, None in train."""
    if getattr(module, "training", True):
        return None
    return bool(torch.is_grad_enabled()) and not bool(torch.is_inference_mode_enabled())
