"""The `launch.*` rules."""

from __future__ import annotations

import statistics

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.inference import BATCH_SIZE
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.inference import is_inference
from perfweb_recommender.rules.signals import training_loader

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
# GPU inference without a trace, judged from facts and NVML:
SMALL_BATCH_MAX = 8  # a median request of at most this many samples is a small batch
SMALL_REQUEST_S = 0.02  # ... and shorter than this (s): launches dominate, not kernels
GPU_IDLE_MIN = 0.5  # GPU idle share (NVML, median) at or above which the host is the limit


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
    """A CPU-only trace with many tiny operators per step (the DataLoader's fetches left out:
    a per-sample transform pipeline is the input's cost, not the model's dispatch)."""
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
        # The per-operator cost is a constant, not read from this run: a prior, which a
        # measured finding (a per-parameter optimizer's share, say) outranks.
        basis=f"prior: {DISPATCH_OVERHEAD_US:g} µs framework overhead per operator x "
        "operators per step, over the mean step time",
        evidence=[
            Evidence(
                "operators per step, DataLoader fetches left out",
                ops["ops_per_step"],
                "ops",
                f"trace rank {trace.rank}",
            ),
            Evidence("median operator time", ops["median_op_us"], "µs", "trace"),
            Evidence("mean step time", step_us, "µs", "trace"),
        ],
    )


def _tiny_steps(evidence: RunEvidence) -> Finding | None:
    """Without a trace: very short steps over a tiny batch point at per-operator overhead."""
    median_step = evidence.median_step_s()
    waited_on = training_loader(evidence)  # the training loop's batches, not an eval's
    batch = waited_on[1].get("batch_size") if waited_on else None
    batch = batch if isinstance(batch, int) and not isinstance(batch, bool) else None
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
