"""Rules about inference runs' requests (a run the agent labelled `inference`)."""

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
