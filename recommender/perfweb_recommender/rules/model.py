"""Model-class rules for inference: int8 quantisation, pruning, distillation.

They change the model, so they can change its results: each fix carries the accuracy
warning, and pruning and distillation, which need a fine-tuning or training run the
optimisation jobs cannot do, are suggestions (no knob) with a prior gain, ranked after every
measured fix and after data-path and operator fixes of similar size (risk class `model`, low
confidence).
"""

from __future__ import annotations

from perfweb_recommender.analysis.module_time import kind_share, mean_call_us
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.inference import (
    QUEUED_BUSY_MIN,
    is_inference,
    latency_evidence,
    module_share_evidence,
    traced_requests,
    workload_evidence,
)
from perfweb_recommender.rules.replayed import call_cost_evidence, replay_estimate
from perfweb_recommender.rules.signals import loop_busy_share
from perfweb_recommender.rules.snippets import dynamic_quantization_snippet

# Linear-dominated: at least this share of the parameters in nn.Linear weights.
LINEAR_PARAM_SHARE_MIN = 0.5
# int8 GEMMs run about twice as fast as fp32 ones: half of the Linear share is recovered.
INT8_LINEAR_RECOVERABLE = 0.5
# Below this mean time per nn.Linear call (µs, outside the profiler) dynamic quantisation's
# per-call cost (quantising the activations) outweighs the faster GEMM: bench/
# inference_costs.py measured int8 at 0.50x at 13 µs per call, 1.21x at 38 µs, 2.2x at
# 100 µs and 6.7x at 2.1 ms (medians, one CPU thread).
MIN_LINEAR_CALL_US = 30.0
FULL_PRECISION = frozenset({"float32", "float16", "bfloat16"})
# Pruning and distillation: a model this large (parameters, packed int8 weights included) ...
LARGE_MODEL_PARAMS = 2_000_000
# ... mostly in Linear and convolution weights (what both shrink) ...
DENSE_PARAM_SHARE_MIN = 0.5
# ... and, with a CPU trace, those modules at least this share of the traced time.
DENSE_TIME_SHARE_MIN = 0.5
PRUNE_START = 0.2  # the fraction to prune first (structured): about that share of their time
DISTIL_STUDENT = 0.5  # a student half the teacher's size: about half of their time


@rule("model.quantization", risk="model")
def model_quantization(evidence: RunEvidence) -> Finding | None:
    """What: a Linear-dominated model serves inference in full precision.

    Why: int8 dynamic quantisation stores nn.Linear weights in int8 and quantises activations
    per call: about twice the GEMM speed and a quarter of the weight memory on CPU. Small
    Linear calls gain nothing (quantising the activations costs more than the GEMM saves),
    so with a CPU trace the rule reads the measured time in nn.Linear and its calls' size.

    Fix: `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`.
    It changes results: measure output agreement (top-1, max difference) on held-out inputs
    before deploying, and keep sensitive layers (the first and last) in fp32 if it drops.
    """
    linear_share = evidence.fact("model.linear_param_share")
    if not is_inference(evidence) or not isinstance(linear_share, (int, float)):
        return None
    if linear_share < LINEAR_PARAM_SHARE_MIN or evidence.fact("model.quantized") is True:
        return None
    dtype = evidence.fact("model.dtype")
    if dtype not in FULL_PRECISION:
        return None
    on_cpu = not evidence.uses_cuda()
    traced = traced_requests(evidence)
    traced_share = kind_share(traced.times, "linear") if traced else None
    call_us = mean_call_us(traced.times, "linear") if traced else None
    replayed = evidence.replays.get("linear")
    slower = False
    if replayed is not None:
        # the best estimate: the run's own Linear shapes in fp32 and int8, on this host; the
        # per-call cost from CPU time, which a busy host does not inflate
        estimate = replay_estimate(
            replayed, current="fp32 nn.Linear", fix="int8 dynamic", acts_on="nn.Linear calls"
        )
        gain, basis, slower = estimate.gain, estimate.basis, estimate.slower
        measured = [
            *estimate.evidence,
            *call_cost_evidence(
                replayed,
                call_us * traced.unprofiled(evidence.median_step_s())
                if traced is not None and call_us is not None
                else None,
                "nn.Linear",
            ),
        ]
    elif traced is not None and traced_share is not None and call_us is not None:
        call_us *= traced.unprofiled(evidence.median_step_s())
        # CPU time, not wall: the share of the time the loop's thread waited for a CPU is
        # what a busy host added to each call
        waited = evidence.run_queue_share()
        if waited is not None:
            call_us *= 1.0 - waited
        if call_us < MIN_LINEAR_CALL_US:
            return None  # int8's per-call cost would eat the gain
        gain = traced_share * INT8_LINEAR_RECOVERABLE
        basis = (
            f"measured: nn.Linear takes {traced_share:.0%} of the traced time ({call_us:.0f} µs "
            f"per call) x {INT8_LINEAR_RECOVERABLE:.0%} recovered by int8 GEMMs"
        )
        measured = [
            *module_share_evidence(traced),
            Evidence(
                "time per nn.Linear call" + (" (run-queue wait taken out)" if waited else ""),
                call_us,
                "µs",
                traced.source,
            ),
        ]
        if waited is not None:
            measured.append(
                Evidence(
                    "the loop's thread waited for a CPU", waited, "fraction", "metrics (schedstat)"
                )
            )
    else:
        gain = float(linear_share) * INT8_LINEAR_RECOVERABLE
        basis = (
            f"parameters in nn.Linear ({linear_share:.0%}, as a proxy for their time share) x "
            f"{INT8_LINEAR_RECOVERABLE:.0%} recovered by int8 GEMMs "
            f"({'no CPU trace' if traced is None else 'no nn.Linear call in the trace'})"
        )
        measured = []
    if slower:
        assert replayed is not None
        return finding(
            "model.quantization",
            title=f"Checked: int8 dynamic quantisation is {replayed.ratio:.1f}x slower for this "
            "model's nn.Linear shapes on this host; keep them in "
            f"{dtype}",
            confidence=0.8,
            gain=0.0,
            basis=basis,
            evidence=[workload_evidence(evidence), *measured],
            fix=Fix(
                text="Not recommended: the replay of the run's own nn.Linear shapes measured "
                "int8 slower than fp32 here (quantising the activations costs more than the "
                "int8 GEMM saves at these sizes).",
                snippet="",
            ),
        )
    return finding(
        "model.quantization",
        title=f"Linear-dominated model ({linear_share:.0%} of parameters) served in {dtype}",
        confidence=0.8 if replayed is not None else 0.5 if on_cpu else 0.3,
        gain=gain,
        basis=basis,
        evidence=[
            workload_evidence(evidence),
            Evidence("parameters in nn.Linear", float(linear_share), "fraction", "facts"),
            Evidence("model dtype", str(dtype), "", "facts"),
            *latency_evidence(evidence),
            *measured,
        ],
        fix=Fix(
            text="Quantise nn.Linear to int8 dynamically. Accuracy warning: this changes "
            "outputs; verify agreement on held-out inputs before deploying.",
            snippet=dynamic_quantization_snippet(evidence),
            knobs={"quantize": "dynamic"} if on_cpu else {},
        ),
    )


def _compressed(evidence: RunEvidence) -> str | None:
    """How the model is already made fast: "int8-quantised", "compiled", or None."""
    if evidence.fact("model.quantized") is True:
        return "int8-quantised"
    if evidence.fact("model.compiled") is True or any(t.compiled for t in evidence.traces):
        return "compiled"
    return None


def _model_bound(evidence: RunEvidence) -> tuple[float, str, list[Evidence]] | None:
    """A large, already quantised or compiled Linear/conv model that is still what the
    service waits for: (share of request time in its Linear/conv layers, where that share
    comes from, evidence); None when any of it is missing."""
    if not is_inference(evidence):
        return None
    params = evidence.fact("model.parameters")
    dense = float(evidence.fact("model.linear_param_share", 0.0)) + float(
        evidence.fact("model.conv_param_share", 0.0)
    )
    done = _compressed(evidence)
    serving = loop_busy_share(evidence)
    if not isinstance(params, (int, float)) or params < LARGE_MODEL_PARAMS or done is None:
        return None
    if dense < DENSE_PARAM_SHARE_MIN or serving is None or serving < QUEUED_BUSY_MIN:
        return None
    items = [
        workload_evidence(evidence),
        Evidence("model parameters", int(params), "parameters", "facts"),
        Evidence("parameters in Linear and convolution layers", dense, "fraction", "facts"),
        Evidence("already", done, "", "facts/trace"),
        *latency_evidence(evidence),
        Evidence("time the loop spends serving", serving, "fraction", "metrics (steps)"),
    ]
    traced = traced_requests(evidence)
    if traced is None:
        return dense, "their parameter share (no CPU trace)", items
    share = (kind_share(traced.times, "linear") or 0.0) + (kind_share(traced.times, "conv") or 0.0)
    if share < DENSE_TIME_SHARE_MIN:
        return None  # the time goes elsewhere: shrinking the layers would not move latency
    return share, "their measured share of the traced time", items + module_share_evidence(traced)


ACCURACY_WARNING = (
    "Accuracy warning: this changes the model and its results; measure accuracy on held-out "
    "data against the current model before deploying."
)


@rule("model.pruning", risk="model")
def model_pruning(evidence: RunEvidence) -> Finding | None:
    """What: a large Linear/convolution model, already int8-quantised or compiled, is still
    what the service waits for: its layers take most of every request.

    Why: the cheaper fixes are spent; what is left is the model's size. Structured pruning
    (whole channels or neurons) removes that share of the layers' work; unstructured sparsity
    rarely speeds up dense kernels.

    Fix: prune structurally, starting at 20% of each layer's channels, fine-tune, and measure
    accuracy on held-out data; raise the fraction in steps only while accuracy holds. No
    knob: pruning needs a fine-tuning run.
    """
    bound = _model_bound(evidence)
    if bound is None:
        return None
    share, where, items = bound
    return finding(
        "model.pruning",
        title=f"Large model still bound by its layers ({share:.0%} of request time): prune it",
        confidence=0.3,
        gain=share * PRUNE_START,
        basis=f"prior: pruning {PRUNE_START:.0%} of the channels saves about that share of the "
        f"Linear/conv time ({share:.0%}, {where})",
        evidence=items,
        fix=Fix(
            text=f"{ACCURACY_WARNING} Start with 20% structured pruning, fine-tune, re-measure "
            "accuracy, and raise the fraction in steps while it holds.",
            snippet="from torch.nn.utils import prune\n"
            "for module in model.modules():\n"
            "    if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):\n"
            '        prune.ln_structured(module, "weight", amount=0.2, n=2, dim=0)\n'
            "# fine-tune, check accuracy, then prune.remove(module, 'weight')",
        ),
    )


@rule("model.distillation", risk="model")
def model_distillation(evidence: RunEvidence) -> Finding | None:
    """What: a large Linear/convolution model, already int8-quantised or compiled, is still
    what the service waits for.

    Why: a smaller student trained to match the model's soft outputs keeps most of its
    accuracy at a fraction of its cost; after quantisation and compilation it is the next
    large saving, and the most work (a training run).

    Fix: train a student (e.g. half the width or depth) on the teacher's logits softened by
    a temperature of 2-5 (loss: KL divergence at that temperature, times T^2, mixed with
    the label loss), then verify accuracy on held-out data. No knob.
    """
    bound = _model_bound(evidence)
    if bound is None:
        return None
    share, where, items = bound
    return finding(
        "model.distillation",
        title=f"Large model still bound by its layers ({share:.0%} of request time): distil a "
        "smaller student",
        confidence=0.2,
        gain=share * DISTIL_STUDENT,
        basis=f"prior: a student {DISTIL_STUDENT:.0%} the size saves about that share of the "
        f"Linear/conv time ({share:.0%}, {where})",
        evidence=items,
        fix=Fix(
            text=f"{ACCURACY_WARNING} Distil into a smaller student with a softmax temperature "
            "of 2-5 on the teacher's logits; compare the student's accuracy with the teacher's.",
            snippet="T = 4.0  # try 2-5\n"
            "soft = torch.nn.functional.kl_div(\n"
            "    (student(x) / T).log_softmax(-1), (teacher(x) / T).softmax(-1),\n"
            '    reduction="batchmean",\n'
            ") * T * T\n"
            "loss = 0.5 * soft + 0.5 * torch.nn.functional.cross_entropy(student(x), y)",
        ),
    )
