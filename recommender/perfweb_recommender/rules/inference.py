"""Rules about how an inference run serves its requests (`inference.dynamic_batching`), and what
every inference rule reads: whether a run is inference, its traced requests, its latency.

They read the agent's facts about the workload (`workload.kind`, `training.backward`) and its
request series. The rules about the model itself (autograd on, channels_last, an eager fp32
runtime) are in rules/inference_model.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from perfweb_recommender.analysis.module_time import MODULE_OPS, kind_share, window_requests
from perfweb_recommender.coverage import workload_kind
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.inference import BATCH_SIZE
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import loop_busy_share, usable_cores

ONE_BY_ONE_MAX_SAMPLES = 2.0  # a median batch of at most this many samples is "one by one"
LOW_UTILIZATION_SHARE = 0.5  # the device busy below this share of the time
MIN_REQUESTS = 20  # requests needed before judging how they are served
BATCHING_RECOVERABLE = 0.5  # share of the idle device assumed recoverable by batching
QUEUED_BUSY_MIN = 0.5  # the loop inside requests at least this share of the time: requests
# wait for it (a queue to batch from); a loop that mostly waits for requests has none
TARGET_BATCH = 8  # the batch the estimates assume dynamic batching gathers
FIT_MIN_PER_SIZE = 5  # requests of each of two sizes at least, to fit latency to batch size
DISPATCH_US_PER_OP = 5.0  # fixed framework cost of one CPU operator call (µs), as
# launch.overhead's DISPATCH_OVERHEAD_US: paid once per call whatever the batch
FIXED_SHARE_MAX = 0.9  # never claim more of a request than this as fixed per-call cost
MIN_BATCHING_GAIN = 0.1  # a smaller estimated throughput gain is not worth a serving change


@dataclass(frozen=True)
class TracedRequests:
    """What a CPU-only profiler window of a serving loop shows (analysis.module_time)."""

    times: dict[str, float]
    requests: int | None  # requests the window spans (from the agent's window name)
    source: str  # "trace rank 0"

    @property
    def per_request_us(self) -> float | None:
        """Traced time per request (µs, the profiler's own overhead included)."""
        return self.times["span_us"] / self.requests if self.requests else None

    def per_request(self, key: str) -> float | None:
        """A count or time of the window divided by the requests it spans."""
        return self.times.get(key, 0.0) / self.requests if self.requests else None

    def unprofiled(self, latency_s: float | None) -> float:
        """Factor from traced to real time: the median request latency the agent timed
        outside the window over the traced time per request (profiling slows every
        operator), at most 1; 1 when either is unknown."""
        traced = self.per_request_us
        if not traced or not latency_s:
            return 1.0
        return min(1.0, latency_s * 1e6 / traced)


def traced_requests(evidence: RunEvidence) -> TracedRequests | None:
    """The first CPU-only trace with top-level operators (a GPU trace's CPU side is launch
    time, not the request's time)."""
    for trace in evidence.traces:
        if trace.launch.get("kernels") or not trace.module_time.get("span_us"):
            continue
        return TracedRequests(
            trace.module_time, window_requests(trace.source), f"trace rank {trace.rank}"
        )
    return None


def module_share_evidence(traced: TracedRequests) -> list[Evidence]:
    """The module types' shares of the traced time, the largest kinds only."""
    shares = {kind: kind_share(traced.times, kind) or 0.0 for kind in MODULE_OPS}
    labels = {
        "linear": "nn.Linear",
        "conv": "convolutions",
        "norm": "normalisation layers",
        "attention": "attention",
    }
    return [
        Evidence(f"traced time in {labels[kind]}", share, "fraction", traced.source)
        for kind, share in sorted(shares.items(), key=lambda item: -item[1])
        if share >= 0.01
    ]


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


@dataclass(frozen=True)
class BatchingEstimate:
    """The throughput gain of batching and how it was estimated."""

    gain: float
    basis: str
    evidence: list[Evidence]


def _fitted_batching(evidence: RunEvidence, median_size: float) -> BatchingEstimate | None:
    """Requests of several sizes: fit latency = fixed + per-sample x size (least squares)
    and compare the time per sample at the median size with that at TARGET_BATCH."""
    sizes = dict(evidence.points(BATCH_SIZE))
    pairs = [(sizes[s.t], s.duration_s) for s in evidence.steady_steps() if s.t in sizes]
    counts: dict[float, int] = {}
    for size, _ in pairs:
        counts[size] = counts.get(size, 0) + 1
    if sum(1 for n in counts.values() if n >= FIT_MIN_PER_SIZE) < 2:
        return None
    per_sample, fixed = np.polyfit([p[0] for p in pairs], [p[1] for p in pairs], 1)
    if fixed <= 0 or per_sample < 0:
        return None
    now = (fixed + per_sample * median_size) / median_size
    batched = (fixed + per_sample * TARGET_BATCH) / TARGET_BATCH
    return BatchingEstimate(
        gain=1.0 - batched / now,
        basis=f"measured: latency fitted over {len(pairs)} requests of {len(counts)} sizes "
        f"({fixed * 1e3:.3f} ms per call + {per_sample * 1e3:.3f} ms per sample); time per "
        f"sample at a batch of {TARGET_BATCH} against the median batch",
        evidence=[
            Evidence("fixed latency per call (fit)", fixed * 1e3, "ms", "metrics (steps)"),
            Evidence("latency per sample (fit)", per_sample * 1e3, "ms", "metrics (steps)"),
        ],
    )


def _traced_batching(evidence: RunEvidence) -> BatchingEstimate | None:
    """A CPU trace of batch-of-one requests: the per-call cost a batch pays once (Python
    between the operators, measured, plus a fixed dispatch cost per operator) as a share of
    the request's latency; a batch of TARGET_BATCH pays it once for all its samples."""
    traced = traced_requests(evidence)
    latency = evidence.median_step_s()
    ops = traced.per_request("top_level_ops") if traced else None
    if traced is None or ops is None or not latency:
        return None
    glue = 1.0 - traced.times["top_level_us"] / traced.times["span_us"]
    dispatch = ops * DISPATCH_US_PER_OP * 1e-6 / latency
    fixed = min(FIXED_SHARE_MAX, max(0.0, glue) + dispatch)
    # The Python between the operators is measured; the dispatch cost per operator is a
    # constant: the estimate is a measurement where the measured part alone carries at least
    # half of it, else a prior.
    label = "measured" if glue >= fixed / 2 else "prior"
    return BatchingEstimate(
        gain=fixed * (1.0 - 1.0 / TARGET_BATCH),
        basis=f"{label}: per-call cost {fixed:.0%} of a request ({glue:.0%} Python between "
        f"operators, measured in the trace; {ops:.0f} operators x {DISPATCH_US_PER_OP:g} µs "
        f"dispatch, a prior: {dispatch:.0%}; over the {latency * 1e3:.2f} ms median latency), "
        f"paid once per batch of {TARGET_BATCH}",
        evidence=[
            Evidence("operators per request", ops, "ops", traced.source),
            Evidence("traced time between operators (Python)", glue, "fraction", traced.source),
            *module_share_evidence(traced),
        ],
    )


def _utilisation_batching(share: float, measured: str) -> BatchingEstimate:
    return BatchingEstimate(
        gain=(1.0 - share) * BATCHING_RECOVERABLE,
        basis=f"{measured} measured; {BATCHING_RECOVERABLE:.0%} of its idle share assumed "
        "recoverable as throughput by batching (a per-request latency cost is not counted)",
        evidence=[],
    )


@rule("inference.dynamic_batching", risk="model")
def inference_dynamic_batching(evidence: RunEvidence) -> Finding | None:
    """What: an inference service handles its requests one by one (a batch of one or two
    samples per call of the model), back to back, while its device is mostly idle or its
    time goes to per-call costs a batch would pay once.

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
    if len(sizes) < MIN_REQUESTS:
        return None
    median_size = statistics.median(sizes)
    serving = loop_busy_share(evidence)
    if median_size > ONE_BY_ONE_MAX_SAMPLES or serving is None or serving < QUEUED_BUSY_MIN:
        return None  # already batched, or nothing waits that a batch could take
    busy = _device_busy(evidence)
    gpu = bool(evidence.values("gpu.utilization"))
    if gpu and busy is not None and busy[0] >= LOW_UTILIZATION_SHARE:
        return None  # the GPU is busy: batching has little idle time to fill
    estimate = _fitted_batching(evidence, median_size)
    if estimate is None and gpu and busy is not None:
        estimate = _utilisation_batching(*busy)
    estimate = estimate or _traced_batching(evidence)
    if estimate is None and busy is not None and busy[0] < LOW_UTILIZATION_SHARE:
        estimate = _utilisation_batching(*busy)
    if estimate is None or estimate.gain < MIN_BATCHING_GAIN:
        return None
    latency = evidence.median_step_s() or 0.0
    measured = [Evidence(busy[1], busy[0], "fraction", "metrics")] if busy else []
    return finding(
        "inference.dynamic_batching",
        title=f"Requests served {median_size:g} sample(s) at a time, back to back: batching "
        f"~{TARGET_BATCH} would serve ~{1 / (1 - estimate.gain):.1f}x the samples per second",
        confidence=0.5,
        gain=estimate.gain,
        basis=estimate.basis,
        evidence=[
            Evidence("samples per request (median)", median_size, "samples", "metrics (steps)"),
            # the requests read (the latest window, as the requests panel says), not the
            # batch-size series' points, which a long run reads downsampled
            Evidence(
                "requests read (the latest window)",
                len(evidence.steps),
                "requests",
                "metrics (steps)",
            ),
            Evidence("median request latency", latency * 1e3, "ms", "metrics (steps)"),
            *measured,
            Evidence("time the loop spends serving", serving, "fraction", "metrics (steps)"),
            *estimate.evidence,
        ],
        fix=Fix(
            text="Gather the requests that arrive within a few ms into one batch per model "
            f"call. Trade-off: throughput up to ~{1 / (1 - estimate.gain):.1f}x at a batch of "
            f"{TARGET_BATCH}, while each request waits up to the gathering window plus one "
            "batched call (check the latency budget).",
            snippet="batch = queue.get_many(max_items=8, timeout_ms=5)  # your server's queue\n"
            "outputs = model(torch.stack([r.input for r in batch]))",
        ),
    )


def is_inference(evidence: RunEvidence) -> bool:
    """The workload serves requests: the agent says so, or eval mode with no backward."""
    if evidence.fact("workload.kind") is not None or evidence.fact("steps.source") is not None:
        return workload_kind(facts=evidence.facts, steps=len(evidence.steps)) == "inference"
    if evidence.fact("training.backward") is not False:
        return False
    return evidence.fact("model.training") is False


def workload_evidence(evidence: RunEvidence) -> Evidence:
    kind = evidence.fact("workload.kind") or "inference (eval mode, no backward)"
    return Evidence("workload", str(kind), "", "facts")


def latency_evidence(evidence: RunEvidence) -> list[Evidence]:
    median = evidence.median_step_s()
    if median is None:
        return []
    return [Evidence("median request latency", median * 1e3, "ms", "metrics (agent steps)")]
