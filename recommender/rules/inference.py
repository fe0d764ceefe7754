"""Rules about inference runs: how requests are served, autograd left on, conv nets in NCHW,
Linear-dominated full-precision models.

They read the agent's facts about the workload (`workload.kind`, `training.backward`), its
request series and, for the model rules, the facts about its primary outermost module
(`model.*`, `inference.grad_enabled`, see agent/model_facts.py). Ordered as the field tunes
serving: data path (zero risk), operators (a numerics check), then the model (accuracy risk).
"""

from __future__ import annotations

import statistics

from recommender.coverage import workload_kind
from recommender.evidence import RunEvidence
from recommender.inference import BATCH_SIZE
from recommender.rules.base import Evidence, Finding, Fix, finding, rule
from recommender.rules.signals import loop_busy_share, usable_cores

ONE_BY_ONE_MAX_SAMPLES = 2.0  # a median batch of at most this many samples is "one by one"
LOW_UTILIZATION_SHARE = 0.5  # the device busy below this share of the time
MIN_REQUESTS = 20  # requests needed before judging how they are served
BATCHING_RECOVERABLE = 0.5  # share of the idle device assumed recoverable by batching
QUEUED_BUSY_MIN = 0.5  # the loop inside requests at least this share of the time: requests
# wait for it (a queue to batch from); a loop that mostly waits for requests has none


def _device_busy(evidence: RunEvidence) -> tuple[float, str] | None:
    """How busy the serving device is, 0..1, and what was measured: the GPUs' median
    utilisation, else the job's CPU over its usable cores."""
    gpu = evidence.values("gpu.utilization")
    if gpu:
        return statistics.median(gpu) / 100.0, "GPU utilisation (median)"
    cpu = evidence.process_values("process.cpu_percent")
    cores = usable_cores(evidence)
    if cpu and cores:
        return min(1.0, statistics.median(cpu) / (100.0 * cores)), "CPU used of usable cores"
    return None


@rule("inference.dynamic_batching", risk="model")
def inference_dynamic_batching(evidence: RunEvidence) -> Finding | None:
    """What: an inference service handles its requests one by one (a batch of one or two
    samples per call of the model), back to back, while the device it runs on is mostly idle.

    Why: a model call costs nearly the same for one sample as for many until the device is
    saturated; serving one at a time pays the fixed cost (launches, Python, weights read from
    memory) per sample and leaves the hardware idle, so throughput stays low.

    Fix: batch requests dynamically: gather the requests that arrive within a few
    milliseconds (up to a maximum batch) and run them through the model in one call
    (TorchServe / Triton dynamic batching, or a small queue in the server). It trades a
    bounded wait per request for throughput; check the latency budget.
    """
    if workload_kind(facts=evidence.facts, steps=len(evidence.steps)) != "inference":
        return None
    sizes = evidence.values(BATCH_SIZE)
    busy = _device_busy(evidence)
    if len(sizes) < MIN_REQUESTS or busy is None:
        return None
    median_size = statistics.median(sizes)
    share, measured = busy
    if median_size > ONE_BY_ONE_MAX_SAMPLES or share >= LOW_UTILIZATION_SHARE:
        return None
    serving = loop_busy_share(evidence)
    if serving is None or serving < QUEUED_BUSY_MIN:  # nothing waits that a batch could take
        return None
    return finding(
        "inference.dynamic_batching",
        title=f"Requests served {median_size:g} sample(s) at a time on a device {share:.0%} busy",
        confidence=0.5,
        gain=(1.0 - share) * BATCHING_RECOVERABLE,
        basis=f"{BATCHING_RECOVERABLE:.0%} of the device's idle share, assumed recoverable as "
        "throughput by batching (a per-request latency cost is not counted)",
        evidence=[
            Evidence("samples per request (median)", median_size, "samples", "metrics (steps)"),
            Evidence("requests", len(sizes), "requests", "metrics (steps)"),
            Evidence(measured, share, "fraction", "metrics"),
            Evidence("time the loop spends serving", serving, "fraction", "metrics (steps)"),
        ],
        fix=Fix(
            text="Gather the requests that arrive within a few ms into one batch per model call.",
            snippet="batch = queue.get_many(max_items=32, timeout_ms=5)  # your server's queue\n"
            "outputs = model(torch.stack([r.input for r in batch]))",
        ),
    )


# Autograd bookkeeping (graph nodes, saved tensors, version counters) on a forward that is
# never differentiated: a prior share of request time, largest for small requests.
AUTOGRAD_PRIOR_GAIN = 0.05
# A conv net: at least this share of the model's parameters in 4-D (convolution) weights.
CONV_PARAM_SHARE_MIN = 0.3
# channels_last on convolution-dominated models (oneDNN on CPU, tensor cores on GPU): prior.
CHANNELS_LAST_PRIOR_GAIN = 0.1
# Linear-dominated: at least this share of the parameters in nn.Linear weights.
LINEAR_PARAM_SHARE_MIN = 0.5
# int8 GEMMs run about twice as fast as fp32 ones: half of the Linear share is recovered.
INT8_LINEAR_RECOVERABLE = 0.5
FULL_PRECISION = frozenset({"float32", "float16", "bfloat16"})


def is_inference(evidence: RunEvidence) -> bool:
    """The workload serves requests: the agent says so, or eval mode with no backward."""
    if evidence.fact("workload.kind") is not None or evidence.fact("steps.source") is not None:
        return workload_kind(facts=evidence.facts, steps=len(evidence.steps)) == "inference"
    if evidence.fact("training.backward") is not False:
        return False
    return evidence.fact("model.training") is False


def _workload(evidence: RunEvidence) -> Evidence:
    kind = evidence.fact("workload.kind") or "inference (eval mode, no backward)"
    return Evidence("workload", str(kind), "", "facts")


def _latency(evidence: RunEvidence) -> list[Evidence]:
    median = evidence.median_step_s()
    if median is None:
        return []
    return [Evidence("median request latency", median * 1e3, "ms", "metrics (agent steps)")]


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
    return finding(
        "inference.autograd_enabled",
        title="Inference runs with autograd recording every request",
        confidence=0.8,
        gain=AUTOGRAD_PRIOR_GAIN,
        basis=f"prior: {AUTOGRAD_PRIOR_GAIN:.0%} of request time in autograd bookkeeping "
        "(no measurement of it in the run)",
        evidence=[
            _workload(evidence),
            Evidence("grad enabled in the model's calls", True, "flag", "facts"),
            *_latency(evidence),
        ],
        fix=Fix(
            text="Serve under torch.inference_mode(); outputs are unchanged.",
            snippet="model.eval()\nwith torch.inference_mode():\n    output = model(batch)",
            knob="inference_mode=true",
        ),
    )


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
    return finding(
        "inference.channels_last",
        title=f"Conv net ({conv_share:.0%} of parameters in convolutions) served in NCHW",
        confidence=0.5,
        gain=CHANNELS_LAST_PRIOR_GAIN,
        basis=f"prior: {CHANNELS_LAST_PRIOR_GAIN:.0%} from NHWC convolution kernels",
        evidence=[
            _workload(evidence),
            Evidence("parameters in convolutions", float(conv_share), "fraction", "facts"),
            Evidence("weights in channels_last", False, "flag", "facts"),
            *_latency(evidence),
        ],
        fix=Fix(
            text="Convert the model and its inputs to channels_last; check output agreement.",
            snippet="model = model.to(memory_format=torch.channels_last)\n"
            "batch = batch.contiguous(memory_format=torch.channels_last)",
            knob="channels_last=true",
        ),
    )


@rule("model.quantization", risk="model")
def model_quantization(evidence: RunEvidence) -> Finding | None:
    """What: a Linear-dominated model serves inference in full precision.

    Why: int8 dynamic quantisation stores nn.Linear weights in int8 and quantises activations
    per call: about twice the GEMM speed and a quarter of the weight memory on CPU.

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
    gain = float(linear_share) * INT8_LINEAR_RECOVERABLE
    return finding(
        "model.quantization",
        title=f"Linear-dominated model ({linear_share:.0%} of parameters) served in {dtype}",
        confidence=0.5 if on_cpu else 0.3,
        gain=gain,
        basis=f"parameters in nn.Linear ({linear_share:.0%}, as a proxy for their time share) x "
        f"{INT8_LINEAR_RECOVERABLE:.0%} recovered by int8 GEMMs",
        evidence=[
            _workload(evidence),
            Evidence("parameters in nn.Linear", float(linear_share), "fraction", "facts"),
            Evidence("model dtype", str(dtype), "", "facts"),
            *_latency(evidence),
        ],
        fix=Fix(
            text="Quantise nn.Linear to int8 dynamically. Accuracy warning: this changes "
            "outputs; verify agreement on held-out inputs before deploying.",
            snippet="model = torch.ao.quantization.quantize_dynamic(\n"
            "    model, {torch.nn.Linear}, dtype=torch.qint8\n)",
            knob="quantize=dynamic" if on_cpu else None,
        ),
    )
