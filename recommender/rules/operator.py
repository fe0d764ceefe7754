"""Operator rules: the same math, executed differently (check compatibility and numerics)."""

from __future__ import annotations

import statistics

from recommender.analysis.summary import TraceSummary
from recommender.evidence import RunEvidence
from recommender.inference import BATCH_SIZE
from recommender.rules.base import Evidence, Finding, Fix, finding, rule
from recommender.rules.inference import CONV_PARAM_SHARE_MIN, is_inference
from recommender.rules.signals import compute_capability

SHORT_KERNEL_SHARE_MIN = 0.5  # fraction of kernels shorter than 10 µs
HOST_WAIT_SHARE_MIN = 0.5  # fraction of GPU idle time that is host wait
IDLE_PCT_MIN = 20.0  # % of the kernel span the GPU is idle
GRAPH_RECOVERABLE = 0.7  # share of host-wait idle CUDA Graphs / torch.compile remove
CPU_OPS_PER_STEP_MIN = 300  # CPU-only: operators per step
CPU_OP_MEDIAN_MAX_US = 20.0  # CPU-only: median operator duration (µs)
DISPATCH_OVERHEAD_US = 5.0  # per-operator framework overhead on the CPU (µs, prior)
TINY_STEP_S = 0.02  # no trace: median step shorter than this (s) ...
TINY_BATCH_MAX = 4  # ... with a DataLoader batch of at most this many samples
TINY_STEP_PRIOR_GAIN = 0.3  # no trace: fixed per-step overhead a larger batch amortises
DENSE_MATH_SHARE_MIN = 0.2  # GEMM/conv share of kernel time worth speeding up
FP32_SIMT_SHARE_MIN = 0.5  # share of dense math in fp32 on CUDA cores
TENSOR_CORE_SHARE_MAX = 0.1  # share of dense math already on tensor cores
TENSOR_CORE_SPEEDUP = 2.0  # conservative speed-up of dense math on tensor cores
CONV_SHARE_MIN = 0.2  # convolution share of kernel time
CUDNN_AUTOTUNE_GAIN = 0.2  # typical share of conv time cudnn.benchmark saves
ATTENTION_SHARE_MIN = 0.1  # softmax + batched GEMM share of kernel time
FUSED_ATTENTION_GAIN = 0.5  # share of that time a fused attention kernel saves
# GPU inference without a trace, judged from facts and NVML:
SMALL_BATCH_MAX = 8  # a median request of at most this many samples is a small batch
SMALL_REQUEST_S = 0.02  # ... and shorter than this (s): launches dominate, not kernels
GPU_IDLE_MIN = 0.5  # GPU idle share (NVML, median) at or above which the host is the limit
INFERENCE_AMP_PRIOR = 0.5  # share of fp32 Linear/conv time tensor cores recover (prior)


def _gpu_busy_share(trace: TraceSummary) -> float:
    t = trace.temporal
    return 1 - t.idle_us / t.kernel_span_us if t.kernel_span_us else 0.0


@rule("launch.overhead", risk="operator")
def launch_overhead(evidence: RunEvidence) -> Finding | None:
    """What: many tiny kernels (or CPU operators), and the device waits on the host between them.

    Why: every operator pays a fixed framework + launch cost of several microseconds; when the
    work per operator is smaller than that, the host's dispatch speed sets the step time.

    Fix: on a GPU, `torch.compile(mode="reduce-overhead")` (fuses operators, replays CUDA
    Graphs; a model that is already compiled needs only the CUDA Graphs), or a larger batch so
    each operator does more work. On a CPU there are no CUDA Graphs: `torch.compile` in its
    default mode, a larger batch, or fewer tiny operators.
    """
    for trace in evidence.traces:
        found = _gpu_launch_bound(trace) or _cpu_dispatch_bound(trace)
        if found is not None:
            return found
    return _tiny_steps(evidence) or _small_gpu_requests(evidence)


def _small_gpu_requests(evidence: RunEvidence) -> Finding | None:
    """Without a trace: GPU inference in small, short requests while NVML shows the GPU
    mostly idle: the host's launches set the pace, what CUDA Graphs replay at once."""
    if evidence.traces or not evidence.uses_cuda() or not is_inference(evidence):
        return None
    sizes, util = evidence.values(BATCH_SIZE), evidence.values("gpu.utilization")
    latency = evidence.median_step_s()
    if not sizes or not util or latency is None:
        return None
    batch, idle = statistics.median(sizes), 1.0 - statistics.median(util) / 100.0
    if batch > SMALL_BATCH_MAX or latency >= SMALL_REQUEST_S or idle < GPU_IDLE_MIN:
        return None
    compiled = evidence.fact("model.compiled") is True
    return _launch_finding(
        fix=_graphs_fix() if compiled else _gpu_compile_fix(),
        title=f"Requests of {batch:g} sample(s) in {latency * 1e3:.1f} ms leave the GPU "
        f"{idle:.0%} idle: capture them as CUDA Graphs",
        gain=idle * GRAPH_RECOVERABLE,
        basis=f"measured: GPU idle {idle:.0%} (NVML, median) x {GRAPH_RECOVERABLE:.0%} assumed "
        "removable by graphs (no trace to split the idle time by cause)",
        evidence=[
            Evidence("samples per request (median)", batch, "samples", "metrics (steps)"),
            Evidence("median request latency", latency * 1e3, "ms", "metrics (steps)"),
            Evidence("GPU idle (median)", idle, "fraction", "metrics (NVML)"),
        ],
        confidence=0.4,
    )


def _gpu_launch_bound(trace: TraceSummary) -> Finding | None:
    """Many sub-10 µs kernels and a GPU idling mostly on host wait."""
    launch = trace.launch
    if launch.get("kernels", 0) < 50:
        return None
    idle_pct = trace.temporal.pct(trace.temporal.idle_us)
    host_wait = trace.host_wait_share()
    short = launch.get("short_kernel_share") or 0.0
    if short < SHORT_KERNEL_SHARE_MIN or host_wait < HOST_WAIT_SHARE_MIN or idle_pct < IDLE_PCT_MIN:
        return None
    return _launch_finding(
        fix=_graphs_fix() if trace.compiled else _gpu_compile_fix(),
        title=f"{short:.0%} of kernels are under 10 µs; the GPU waits on the host",
        gain=idle_pct / 100 * host_wait * GRAPH_RECOVERABLE,
        basis=f"host-wait idle ({idle_pct * host_wait:.1f}% of GPU time) x "
        f"{GRAPH_RECOVERABLE:.0%} removable by graphs/fusion",
        evidence=[
            Evidence("kernels under 10 µs", short, "fraction", f"trace rank {trace.rank}"),
            Evidence("GPU idle", idle_pct, "% of kernel span", "trace"),
            Evidence("idle that is host wait", host_wait, "fraction", "trace"),
        ],
    )


def _cpu_dispatch_bound(trace: TraceSummary) -> Finding | None:
    """A CPU-only trace with many tiny operators per step."""
    ops = trace.cpu_ops
    if trace.launch.get("kernels", 0) or ops.get("ops_per_step", 0) < CPU_OPS_PER_STEP_MIN:
        return None
    if not 0 < ops.get("median_op_us", 0) <= CPU_OP_MEDIAN_MAX_US:
        return None
    step_us = trace.mean_step_us or 0.0
    overhead = ops["ops_per_step"] * DISPATCH_OVERHEAD_US
    return _launch_finding(
        fix=_graphs_fix() if trace.compiled else _cpu_fix(),
        title=f"{ops['ops_per_step']:.0f} tiny operators per step "
        f"(median {ops['median_op_us']:.1f} µs)",
        gain=min(0.8, overhead / step_us) if step_us else 0.0,
        basis=f"{DISPATCH_OVERHEAD_US:g} µs framework overhead per operator x "
        "operators per step, over the mean step time",
        evidence=[
            Evidence("operators per step", ops["ops_per_step"], "ops", f"trace rank {trace.rank}"),
            Evidence("median operator time", ops["median_op_us"], "µs", "trace"),
            Evidence("mean step time", step_us, "µs", "trace"),
        ],
    )


def _tiny_steps(evidence: RunEvidence) -> Finding | None:
    """Without a trace: very short steps over a tiny batch point at per-operator overhead."""
    median_step = evidence.median_step_s()
    batches = [d.get("batch_size") for d in evidence.dataloaders()]
    batch = min((b for b in batches if isinstance(b, int)), default=None)
    if evidence.traces or median_step is None or batch is None:
        return None
    if median_step >= TINY_STEP_S or batch > TINY_BATCH_MAX:
        return None
    return _launch_finding(
        fix=_gpu_compile_fix() if evidence.uses_cuda() else _cpu_fix(),
        title=f"Steps of {median_step * 1e3:.1f} ms over batches of {batch}: overhead-bound",
        gain=TINY_STEP_PRIOR_GAIN,
        basis=f"prior: {TINY_STEP_PRIOR_GAIN:.0%} of step time is fixed per-operator overhead "
        "at this batch size (no profiler trace to measure it)",
        evidence=[
            Evidence("median step time", median_step * 1e3, "ms", "metrics (agent step timings)"),
            Evidence("DataLoader batch size", batch, "samples", "facts"),
        ],
        confidence=0.4,
    )


def _launch_finding(
    *,
    title: str,
    gain: float,
    basis: str,
    evidence: list[Evidence],
    fix: Fix,
    confidence: float = 0.7,
) -> Finding:
    return finding(
        "launch.overhead",
        title=title,
        confidence=confidence,
        gain=gain,
        basis=basis,
        evidence=evidence,
        fix=fix,
    )


def _gpu_compile_fix() -> Fix:
    """Eager model on a GPU: fuse the small kernels and replay them as CUDA Graphs."""
    return Fix(
        text="Fuse the small operators and cut per-launch cost, or give each one more work.",
        snippet='model = torch.compile(model, mode="reduce-overhead")\n# or: a larger batch_size',
        knobs={"compile": "reduce-overhead"},
    )


def _graphs_fix() -> Fix:
    """Already compiled (CompiledFxGraph / Triton kernels): compiling again changes nothing;
    what is left is the launch cost CUDA Graphs remove."""
    return Fix(
        text="The model already runs compiled; capture CUDA Graphs so the launches are replayed "
        "at once (torch.compile's reduce-overhead mode, or a serving engine's CUDA-graph mode, "
        "e.g. vLLM without enforce_eager), or give each kernel more work (a larger batch).",
        snippet="# already compiled: keep it, and capture CUDA Graphs\n"
        'model = torch.compile(model, mode="reduce-overhead")  # instead of the default mode',
    )


def _cpu_fix() -> Fix:
    """A CPU run has no CUDA Graphs: fuse with torch.compile's default mode, or do more per op."""
    return Fix(
        text="Fuse the small operators with torch.compile (default mode: CUDA Graphs do not "
        "exist on a CPU), give each operator more work with a larger batch, or use fewer, "
        "larger tensor operations instead of many tiny ones.",
        snippet="model = torch.compile(model)  # default mode\n# or: a larger batch_size",
        knobs={"compile": "default"},
    )


def _fp32_dense(trace: TraceSummary) -> float | None:
    """Share of step time in fp32 CUDA-core GEMM/conv kernels, when that is the pattern."""
    tc = trace.tensor_cores
    if tc.get("dense_math_share", 0) < DENSE_MATH_SHARE_MIN:
        return None
    if tc.get("fp32_simt_share", 0) < FP32_SIMT_SHARE_MIN:
        return None
    if tc.get("tensor_core_share", 0) > TENSOR_CORE_SHARE_MAX:
        return None
    return _gpu_busy_share(trace) * tc["dense_math_share"] * tc["fp32_simt_share"]


@rule("precision.amp", risk="operator")
def precision_amp(evidence: RunEvidence) -> Finding | None:
    """What: GEMMs and convolutions run in fp32 on CUDA cores; no tensor-core kernels.

    Why: since Volta (compute capability 7.0) tensor cores run fp16/bf16 matrix math several
    times faster than fp32 CUDA cores, and halve activation memory traffic.

    Fix: wrap the forward pass in `torch.autocast` (bf16; or fp16 with a GradScaler).
    """
    capability = compute_capability(evidence)
    if capability is None or capability < (7, 0) or evidence.fact("amp.autocast") is True:
        return None
    for trace in evidence.traces:
        share = _fp32_dense(trace)
        if share is None:
            continue
        tc = trace.tensor_cores
        return finding(
            "precision.amp",
            title=f"{tc['fp32_simt_share']:.0%} of matrix math runs in fp32 without tensor cores",
            confidence=0.6,
            gain=share * (1 - 1 / TENSOR_CORE_SPEEDUP),
            basis=f"fp32 GEMM/conv share of step ({share:.1%}) x (1 - 1/{TENSOR_CORE_SPEEDUP:g})",
            evidence=[
                Evidence(
                    "GEMM/conv share of kernel time", tc["dense_math_share"], "fraction", "trace"
                ),
                Evidence("of which fp32 CUDA-core", tc["fp32_simt_share"], "fraction", "trace"),
                Evidence(
                    "compute capability", f"{capability[0]}.{capability[1]}", "", "facts/trace"
                ),
            ],
            fix=Fix(
                text="Run the forward pass under autocast (bf16 needs no GradScaler).",
                snippet='with torch.autocast("cuda", dtype=torch.bfloat16):\n'
                "    loss = model(x).loss",
                knobs={"amp": "bf16"},
            ),
        )
    return _fp32_gpu_inference(evidence, capability)


def _fp32_gpu_inference(evidence: RunEvidence, capability: tuple[int, int]) -> Finding | None:
    """Without a GPU trace: inference of an fp32 Linear/conv model on a tensor-core GPU."""
    if any(t.launch.get("kernels") for t in evidence.traces) or not is_inference(evidence):
        return None
    dense = float(evidence.fact("model.linear_param_share", 0.0)) + float(
        evidence.fact("model.conv_param_share", 0.0)
    )
    if evidence.fact("model.dtype") != "float32" or dense < 0.5:
        return None
    bf16 = capability >= (8, 0)
    dtype = "bfloat16" if bf16 else "float16"
    return finding(
        "precision.amp",
        title=f"fp32 inference on a GPU with {dtype} tensor cores "
        f"(compute capability {capability[0]}.{capability[1]})",
        confidence=0.4,
        gain=min(1.0, dense) * INFERENCE_AMP_PRIOR,
        basis=f"prior: {INFERENCE_AMP_PRIOR:.0%} of the Linear/conv time (their parameter share "
        f"{dense:.0%} as a proxy; no GPU trace to measure kernel time)",
        evidence=[
            Evidence("model dtype", "float32", "", "facts"),
            Evidence("parameters in Linear and convolution layers", dense, "fraction", "facts"),
            Evidence("compute capability", f"{capability[0]}.{capability[1]}", "", "facts"),
            Evidence("autocast", False, "flag", "facts"),
        ],
        fix=Fix(
            text=f"Serve under {dtype} autocast (no GradScaler at inference); check output "
            "agreement before deploying.",
            snippet=f'with torch.inference_mode(), torch.autocast("cuda", dtype=torch.{dtype}):\n'
            "    output = model(batch)",
            knobs={"amp": "bf16"} if bf16 else {},
        ),
    )


@rule("precision.tf32", risk="operator")
def precision_tf32(evidence: RunEvidence) -> Finding | None:
    """What: fp32 matrix math on an Ampere-or-newer GPU with TF32 disabled.

    Why: TF32 tensor cores run fp32 matmuls up to 8x faster with a 10-bit mantissa, which is
    enough for training almost every network.

    Fix: `torch.set_float32_matmul_precision("high")`.
    """
    capability = compute_capability(evidence)
    if capability is None or capability < (8, 0):
        return None
    precision = evidence.fact("torch.float32_matmul_precision")
    if precision != "highest" or evidence.fact("cuda.matmul.allow_tf32") is True:
        return None
    shares = [s for s in (_fp32_dense(t) for t in evidence.traces) if s is not None]
    gain = max(shares) * (1 - 1 / TENSOR_CORE_SPEEDUP) if shares else 0.1
    return finding(
        "precision.tf32",
        title="fp32 matmuls on an Ampere+ GPU with TF32 off",
        confidence=0.7 if shares else 0.5,
        gain=gain,
        basis="fp32 GEMM/conv share x (1 - 1/2)" if shares else "prior: 10% (no trace)",
        evidence=[
            Evidence("float32_matmul_precision", precision, "", "facts"),
            Evidence("compute capability", f"{capability[0]}.{capability[1]}", "", "facts/trace"),
        ],
        fix=Fix(
            text="Allow TF32 tensor cores for fp32 matmuls.",
            snippet='torch.set_float32_matmul_precision("high")',
            knobs={"tf32": True},
        ),
    )


@rule("precision.scaler_misuse", risk="operator")
def precision_scaler_misuse(evidence: RunEvidence) -> Finding | None:
    """What: fp16 autocast without a GradScaler, or `scaler.step()` without `scaler.update()`.

    Why: fp16 gradients underflow to zero without loss scaling; a scaler that never updates
    keeps a stale scale, skipping steps or underflowing. Training silently degrades.

    A GradScaler built with `enabled=False` counts as none. Both cases are critical: the run
    trains wrong without failing.

    Fix: scale -> backward -> step -> update, every step.
    """
    items: list[Evidence] = []
    if evidence.fact("amp.scaler_step_without_update") is True:
        items.append(Evidence("scaler.step without scaler.update", True, "flag", "facts"))
    dtype = str(evidence.fact("amp.autocast_dtype", ""))
    scaler_works = (
        evidence.fact("amp.grad_scaler") is True
        and evidence.fact("amp.grad_scaler_enabled") is not False
    )
    if (
        "float16" in dtype
        and "bfloat16" not in dtype
        and evidence.fact("training.backward") is True
        and not scaler_works
    ):
        label = (
            "fp16 autocast with GradScaler(enabled=False)"
            if evidence.fact("amp.grad_scaler_enabled") is False
            else "fp16 autocast without GradScaler"
        )
        items.append(Evidence(label, dtype, "", "facts"))
    if not items:
        return None
    return finding(
        "precision.scaler_misuse",
        title="fp16 mixed precision without a working GradScaler",
        confidence=0.8,
        gain=0.0,
        basis="correctness, not speed: no time estimate (critical)",
        critical=True,
        evidence=items,
        fix=Fix(
            text="Use GradScaler in the order scale, backward, step, update.",
            snippet="scaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\nscaler.update()",
        ),
    )


@rule("cudnn.benchmark", risk="operator")
def cudnn_benchmark(evidence: RunEvidence) -> Finding | None:
    """What: a convolution-heavy model runs with `cudnn.benchmark=False`.

    Why: with fixed input shapes, cuDNN's autotuner picks the fastest convolution algorithm
    once; without it a heuristic choice can be much slower.

    Fix: `torch.backends.cudnn.benchmark = True` (when input shapes do not change every step).
    """
    if evidence.fact("cudnn.benchmark") is not False or not evidence.uses_cuda():
        return None  # cuDNN runs only on CUDA: the flag means nothing to a CPU run
    for trace in evidence.traces:
        conv = trace.tensor_cores.get("conv_share", 0.0)
        if conv < CONV_SHARE_MIN:
            continue
        share = _gpu_busy_share(trace) * conv
        return finding(
            "cudnn.benchmark",
            title=f"Convolutions take {conv:.0%} of GPU kernel time without cuDNN autotuning",
            confidence=0.5,
            gain=share * CUDNN_AUTOTUNE_GAIN,
            basis=f"conv share of step ({share:.1%}) x {CUDNN_AUTOTUNE_GAIN:.0%} typical saving",
            evidence=[
                Evidence("convolution share of kernel time", conv, "fraction", "trace"),
                Evidence("cudnn.benchmark", False, "flag", "facts"),
            ],
            fix=Fix(
                text="Let cuDNN benchmark its convolution algorithms once per input shape.",
                snippet="torch.backends.cudnn.benchmark = True",
                knobs={"cudnn_benchmark": True},
            ),
        )
    return _fixed_shape_conv_inference(evidence)


def _fixed_shape_conv_inference(evidence: RunEvidence) -> Finding | None:
    """Without a GPU trace: a conv net served on CUDA with one input shape in every call."""
    conv = evidence.fact("model.conv_param_share")
    if any(t.launch.get("kernels") for t in evidence.traces) or not is_inference(evidence):
        return None
    if not isinstance(conv, (int, float)) or conv < CONV_PARAM_SHARE_MIN:
        return None
    if evidence.fact("inference.input_shapes") != "fixed":
        return None  # varying shapes re-tune per shape: the autotuner may cost more than it saves
    return finding(
        "cudnn.benchmark",
        title=f"Conv net ({conv:.0%} of parameters in convolutions) served on CUDA with fixed "
        "input shapes and no cuDNN autotuning",
        confidence=0.4,
        gain=float(conv) * CUDNN_AUTOTUNE_GAIN,
        basis=f"prior: {CUDNN_AUTOTUNE_GAIN:.0%} of the convolution time (their parameter share "
        f"{conv:.0%} as a proxy; no GPU trace to measure it)",
        evidence=[
            Evidence("parameters in convolutions", float(conv), "fraction", "facts"),
            Evidence("input shapes of the model's calls", "fixed", "", "facts"),
            Evidence("cudnn.benchmark", False, "flag", "facts"),
        ],
        fix=Fix(
            text="Let cuDNN benchmark its convolution algorithms once for the fixed shape.",
            snippet="torch.backends.cudnn.benchmark = True",
            knobs={"cudnn_benchmark": True},
        ),
    )


@rule("attention.fused", risk="operator")
def attention_fused(evidence: RunEvidence) -> Finding | None:
    """What: hand-written attention (matmul -> softmax -> matmul) takes much of the GPU time.

    Why: the unfused form writes the full attention matrix to memory and reads it back; fused
    Flash / memory-efficient kernels never materialise it.

    Fix: `torch.nn.functional.scaled_dot_product_attention(q, k, v)`.
    """
    for trace in evidence.traces:
        markers = trace.markers
        if any("scaled_dot_product" in m for m in markers):
            continue
        if not (markers.get("aten::bmm") or markers.get("aten::baddbmm")):
            continue
        if not (markers.get("aten::softmax") or markers.get("aten::_softmax")):
            continue
        share = trace.tensor_cores.get("softmax_bmm_share", 0.0)
        if share < ATTENTION_SHARE_MIN:
            continue
        step_share = _gpu_busy_share(trace) * share
        return finding(
            "attention.fused",
            title=f"Unfused attention (bmm + softmax) takes {share:.0%} of kernel time",
            confidence=0.4,
            gain=step_share * FUSED_ATTENTION_GAIN,
            basis=f"softmax/batched-GEMM share of step x {FUSED_ATTENTION_GAIN:.0%}",
            evidence=[
                Evidence("softmax + batched GEMM share of kernel time", share, "fraction", "trace"),
                Evidence("aten::bmm calls", markers.get("aten::bmm", 0), "calls", "trace"),
            ],
            fix=Fix(
                text="Use PyTorch's fused attention.",
                snippet="from torch.nn.functional import scaled_dot_product_attention\n"
                "out = scaled_dot_product_attention(q, k, v, is_causal=True)",
            ),
        )
    return None
