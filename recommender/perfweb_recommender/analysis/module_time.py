"""Module types' share of a trace's time, from its top-level CPU operators.

The forward of a leaf nn.Module shows in a Kineto trace as one top-level CPU operator:
nn.Linear as `aten::linear` (`quantized::linear_dynamic` once quantised), a convolution as
`aten::conv2d`, a LayerNorm as `aten::layer_norm`. Summing the top-level operators of each
kind over the traced span (first top-level operator's start to the last one's end, Python
time between operators included) gives the share of a request's time each kind of module
takes: what the inference rules need to estimate what int8 Linear, channels_last or
batching would recover. On a GPU trace these are host-side times (launches); the kernels'
shares are in `host_device.tensor_core_stats`.
"""

from __future__ import annotations

import math

import numpy as np

from perfweb_contract.protocol import WindowName
from perfweb_recommender.analysis.preemption import capped_calls, capped_gaps
from perfweb_recommender.trace.model import CPU_OP, RankTrace

# Top-level operator names per module kind (an outer name only: its callees nest inside).
MODULE_OPS: dict[str, tuple[str, ...]] = {
    "linear": ("aten::linear", "quantized::linear_dynamic", "quantized::linear"),
    "conv": (
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "quantized::conv2d",
    ),
    "norm": (
        "aten::layer_norm",
        "aten::batch_norm",
        "aten::group_norm",
        "aten::instance_norm",
        "aten::rms_norm",
    ),
    "attention": ("aten::scaled_dot_product_attention", "aten::_native_multi_head_attention"),
}
# Top-level operators that never record autograd: factories, index results, copies in.
NO_AUTOGRAD_OPS = frozenset(
    {
        "aten::empty",
        "aten::zeros",
        "aten::ones",
        "aten::full",
        "aten::arange",
        "aten::rand",
        "aten::randn",
        "aten::randint",
        "aten::normal_",
        "aten::argmax",
        "aten::argmin",
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::detach",
        "aten::stack",
        "aten::cat",
    }
)


def module_time(trace: RankTrace) -> dict[str, float]:
    """The traced span (µs), its top-level CPU operators (count, µs, how many can record
    autograd) and the µs and call count of each module kind in MODULE_OPS; {} without CPU
    operators. Times are a preemption's wait taken out (analysis.preemption): a call capped
    against the same call of the window's other requests, where every request runs the same
    operators in the same order (`_places`), and each gap between operators against their
    median."""
    ops = trace.cpu.cpu_class == CPU_OP
    if not ops.any():
        return {}
    starts, durations = trace.cpu.ts[ops], trace.cpu.dur[ops]
    names = trace.cpu.name_id[ops]
    order = np.lexsort((-durations, starts))  # outer operators first at equal starts
    ends = (starts + durations)[order]
    # Top level: an operator that ends after every operator that started before it (one
    # that ends inside an earlier one is its callee).
    before = np.maximum.accumulate(np.concatenate(([-np.inf], ends[:-1])))
    top = order[ends > before]
    top_names = [
        trace.cpu_names[names[i]] if 0 <= names[i] < len(trace.cpu_names) else "" for i in top
    ]
    cost = capped_calls(
        [float(durations[i]) for i in top], _places(top_names, window_requests(trace.source))
    )
    gaps = capped_gaps((starts[top[1:]] - (starts[top[:-1]] + durations[top[:-1]])).tolist())
    kind_of = {name: kind for kind, group in MODULE_OPS.items() for name in group}
    result: dict[str, float] = {
        "span_us": math.fsum(cost) + math.fsum(gaps),
        "top_level_ops": float(len(top)),
        "top_level_us": math.fsum(cost),
        "autograd_ops": 0.0,
    }
    for kind in MODULE_OPS:
        result[f"{kind}_us"] = 0.0
        result[f"{kind}_calls"] = 0.0
    for name, us in zip(top_names, cost, strict=True):
        if name not in NO_AUTOGRAD_OPS:
            result["autograd_ops"] += 1
        module_kind = kind_of.get(name)
        if module_kind is not None:
            result[f"{module_kind}_us"] += us
            result[f"{module_kind}_calls"] += 1
    return {k: round(v, 3) for k, v in result.items()}


def _places(names: list[str], requests: int | None) -> list[tuple[int, str] | None]:
    """Each top-level operator's place in its request, (index, name), where the window's
    `requests` ran the same operators in the same order (like calls, whatever their shapes);
    None for every operator otherwise (nothing to compare a call with)."""
    if not requests or requests < 2 or len(names) % requests:
        return [None] * len(names)
    period = len(names) // requests
    if any(name != names[i % period] for i, name in enumerate(names)):
        return [None] * len(names)
    return [(i % period, name) for i, name in enumerate(names)]


def kind_share(times: dict[str, float], kind: str) -> float | None:
    """Share of the traced span in one module kind, None without a span."""
    span = times.get("span_us", 0.0)
    return min(1.0, times.get(f"{kind}_us", 0.0) / span) if span > 0 else None


def mean_call_us(times: dict[str, float], kind: str) -> float | None:
    """Mean duration of one call of a module kind (µs), None when it was never called."""
    calls = times.get(f"{kind}_calls", 0.0)
    return times.get(f"{kind}_us", 0.0) / calls if calls else None


def window_requests(source: str) -> int | None:
    """Steps (requests) a window of the agent's profiler spans, from its file name
    (`rank0-step20-25.pt.trace.json.gz`: 5); None for a trace named otherwise."""
    window = WindowName.parse(source)
    return window.steps if window is not None and window.steps > 0 else None
