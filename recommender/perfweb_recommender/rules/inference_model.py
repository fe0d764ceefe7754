"""Rules about an inference model left as trained: autograd left on, conv nets in NCHW,
Linear-dominated full-precision models run eager.

They read the facts about the workload's primary outermost module (`model.*`,
`inference.grad_enabled`, see the agent's runtime/model_facts.py) and, where one was captured, its
CPU trace and a replay of its own shapes. Ordered as the field tunes serving: data path (zero
risk), operators (a numerics check), then the model (accuracy risk). How requests are served,
and what says a run is inference, are in rules/inference.py.
"""

from __future__ import annotations

from perfweb_recommender.analysis.module_time import kind_share
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.inference import (
    is_inference,
    latency_evidence,
    module_share_evidence,
    traced_requests,
    workload_evidence,
)
from perfweb_recommender.rules.replayed import ReplayEstimate, replay_estimate

# Autograd bookkeeping (graph nodes, saved tensors, version counters) on a forward that is
# never differentiated: a prior share of request time, largest for small requests.
AUTOGRAD_PRIOR_GAIN = 0.05
# Measured instead from a CPU trace: operators per request that record autograd x its cost
# per operator (µs): bench/inference_costs.py measured a median 4.0 µs (1.3-5.8) of CPU time
# per top-level operator; 3 µs keeps the estimate on the low side.
AUTOGRAD_US_PER_OP = 3.0
AUTOGRAD_GAIN_MAX = 0.6  # never claim more of a request than this for autograd
# A conv net: at least this share of the model's parameters in 4-D (convolution) weights.
CONV_PARAM_SHARE_MIN = 0.3
# channels_last on convolution-dominated models (oneDNN on CPU, tensor cores on GPU): prior.
CHANNELS_LAST_PRIOR_GAIN = 0.1
# Share of the convolutions' time NHWC kernels recover, applied to their measured share of a
# trace: examples/serving_conv_eager.py's net ran 1.34x faster (1.17-1.68) in channels_last
# on one CPU thread (bench/inference_costs.py), ~30% of its convolutions' time.
CHANNELS_LAST_RECOVERABLE = 0.3


@rule("inference.autograd_enabled", risk="data-path")
def inference_autograd_enabled(evidence: RunEvidence) -> Finding | None:
    """What: an inference workload calls its model with autograd recording.

    Why: outside `torch.no_grad()` / `torch.inference_mode()` every forward builds an autograd
    graph, saves activations for a backward that never comes and bumps version counters: time
    and memory spent for nothing, worst on small requests.

    Fix: wrap serving in `torch.inference_mode()` (after `model.eval()`). Outputs are identical;
    tensors made inside cannot later be used in autograd.
    """
    if not is_inference(evidence) or evidence.fact("inference.grad_enabled") is not True:
        return None
    replayed = evidence.replays.get("ops")
    if replayed is not None:
        estimate = replay_estimate(
            replayed,
            current="the recorded operators with autograd",
            fix="inference_mode",
            acts_on="top-level operators",
            cap=AUTOGRAD_GAIN_MAX,
        )
        if estimate.slower:
            return _checked(
                "inference.autograd_enabled",
                evidence,
                estimate,
                title=f"Checked: inference_mode measured no faster ({replayed.ratio:.2f}x the "
                "CPU time) on the run's recorded operators",
            )
        gain, basis, measured = estimate.gain, estimate.basis, estimate.evidence
    else:
        gain, basis, measured = _autograd_cost(evidence)
    return finding(
        "inference.autograd_enabled",
        title="Inference runs with autograd recording every request",
        confidence=0.8,
        gain=gain,
        basis=basis,
        evidence=[
            workload_evidence(evidence),
            Evidence("grad enabled in the model's calls", True, "flag", "facts"),
            *latency_evidence(evidence),
            *measured,
        ],
        fix=Fix(
            text="Serve under torch.inference_mode(); outputs are unchanged.",
            snippet="model.eval()\nwith torch.inference_mode():\n    output = model(batch)",
            knobs={"inference_mode": True},
        ),
    )


def _autograd_cost(evidence: RunEvidence) -> tuple[float, str, list[Evidence]]:
    """Autograd's share of a request: measured from a CPU trace's operators per request
    when there is one, else the prior."""
    traced = traced_requests(evidence)
    latency = evidence.median_step_s()
    ops = traced.per_request("autograd_ops") if traced else None
    if traced is None or ops is None or not latency:
        basis = (
            f"prior: {AUTOGRAD_PRIOR_GAIN:.0%} of request time in autograd bookkeeping "
            "(no CPU profiler trace of the requests to count their operators)"
        )
        return AUTOGRAD_PRIOR_GAIN, basis, []
    cost = ops * AUTOGRAD_US_PER_OP * 1e-6
    basis = (
        f"measured: {ops:.0f} operators per request record autograd (trace) x "
        f"{AUTOGRAD_US_PER_OP:g} µs of bookkeeping each, over the {latency * 1e3:.2f} ms median "
        "request latency"
    )
    evidence_items = [
        Evidence("operators per request that record autograd", ops, "ops", traced.source),
        Evidence("autograd bookkeeping per request (estimate)", cost * 1e3, "ms", traced.source),
    ]
    return min(AUTOGRAD_GAIN_MAX, cost / latency), basis, evidence_items


@rule("inference.channels_last", risk="operator")
def inference_channels_last(evidence: RunEvidence) -> Finding | None:
    """What: a convolution network serves inference in the default NCHW memory format.

    Why: oneDNN on CPU and cuDNN's tensor-core kernels on GPU are fastest in NHWC
    (channels_last); in NCHW they reorder every activation or take slower kernels.

    Fix: `model.to(memory_format=torch.channels_last)` and the same for 4-D inputs; compare
    outputs before and after (same math, a different summation order).
    """
    conv_share = evidence.fact("model.conv_param_share")
    if not is_inference(evidence) or not isinstance(conv_share, (int, float)):
        return None
    if conv_share < CONV_PARAM_SHARE_MIN or evidence.fact("model.channels_last") is not False:
        return None
    traced = traced_requests(evidence)
    measured = kind_share(traced.times, "conv") if traced else None
    replayed = evidence.replays.get("conv")
    if replayed is not None:
        estimate = replay_estimate(
            replayed,
            current="NCHW convolutions",
            fix="channels_last",
            acts_on="convolutions",
        )
        if estimate.slower:
            return _checked(
                "inference.channels_last",
                evidence,
                estimate,
                title=f"Checked: channels_last is {replayed.ratio:.2f}x slower for this model's "
                "convolution shapes on this host; keep NCHW",
            )
        gain, basis, shares = estimate.gain, estimate.basis, estimate.evidence
    elif traced is not None and measured:
        gain = measured * CHANNELS_LAST_RECOVERABLE
        basis = (
            f"measured: convolutions take {measured:.0%} of the traced time x "
            f"{CHANNELS_LAST_RECOVERABLE:.0%} recovered by NHWC kernels"
        )
        shares = module_share_evidence(traced)
    else:
        gain, shares = CHANNELS_LAST_PRIOR_GAIN, []
        basis = f"prior: {CHANNELS_LAST_PRIOR_GAIN:.0%} from NHWC kernels (no CPU trace)"
    return finding(
        "inference.channels_last",
        title=f"Conv net ({conv_share:.0%} of parameters in convolutions) served in NCHW",
        confidence=0.8 if replayed is not None else 0.5,
        gain=gain,
        basis=basis,
        evidence=[
            workload_evidence(evidence),
            Evidence("parameters in convolutions", float(conv_share), "fraction", "facts"),
            Evidence("weights in channels_last", False, "flag", "facts"),
            *latency_evidence(evidence),
            *shares,
        ],
        fix=Fix(
            text="Convert the model and its inputs to channels_last; check output agreement.",
            snippet="model = model.to(memory_format=torch.channels_last)\n"
            "batch = batch.contiguous(memory_format=torch.channels_last)",
            knobs={"channels_last": True},
        ),
    )


def _checked(
    rule_id: str, evidence: RunEvidence, estimate: ReplayEstimate, *, title: str
) -> Finding:
    """A fix its replay measured slower: listed as checked, with the figure; not recommended
    (gain 0, no knob to try)."""
    return finding(
        rule_id,
        title=title,
        confidence=0.8,
        gain=0.0,
        basis=estimate.basis,
        evidence=[workload_evidence(evidence), *latency_evidence(evidence), *estimate.evidence],
        fix=Fix(
            text="Not recommended: the replay of the run's own shapes measured it slower "
            "on this host."
        ),
    )


UNCOMPILED_INFERENCE_PRIOR_GAIN = 0.3  # eager fp32 vs a compiled / reduced-precision runtime


@rule("inference.compile_runtime", risk="model")
def inference_compile_runtime(evidence: RunEvidence) -> Finding | None:
    """What: an inference workload runs in eager fp32.

    Why: an inference runtime (TensorRT, ONNX Runtime, torch.compile) fuses operators and uses
    reduced precision; eager fp32 leaves most of that speed unused.

    Fix: compile or export the model and check its accuracy on held-out data first.
    """
    if evidence.fact("training.backward") is not False or not evidence.steps:
        return None
    if evidence.fact("amp.autocast") is True or not evidence.uses_cuda():
        return None
    if any(t.compiled for t in evidence.traces):
        return None  # already compiled (CompiledFxGraph / Triton kernels in its trace)
    return finding(
        "inference.compile_runtime",
        title="Inference in eager fp32",
        confidence=0.4,
        gain=UNCOMPILED_INFERENCE_PRIOR_GAIN,
        basis=f"prior: {UNCOMPILED_INFERENCE_PRIOR_GAIN:.0%} from fusion and reduced precision",
        evidence=[
            Evidence("backward ever ran", False, "flag", "facts"),
            Evidence("autocast", False, "flag", "facts"),
        ],
        fix=Fix(
            text="Compile the model (check accuracy before deploying).",
            snippet='model = torch.compile(model)  # mode="max-autotune": longer compile, faster',
            knobs={"compile": "default"},  # what "Try this fix" measures, with output agreement
        ),
    )
