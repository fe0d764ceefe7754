"""Distributed rules read from how ranks communicate and keep pace: exposed communication,
stragglers, all-reduce per small batch, a Reduce then a Broadcast of one tensor."""

from __future__ import annotations

import statistics

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.anatomy import step_anatomy
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import per_step

COMM_SHARE_MIN = 0.10  # exposed (non-overlapped) communication, fraction of GPU time
COMM_OVERLAP_MAX = 50.0  # % of communication overlapped by compute
COMM_RECOVERABLE = 0.5  # share of exposed communication better overlap can hide
STRAGGLER_RATIO_MIN = 1.2  # a rank's median step / median over ranks
ALLREDUCE_SHARE_MIN = 0.10  # exposed all-reduce time, fraction of the kernel span
SMALL_BATCH_MAX = 64  # per-rank DataLoader batch at which accumulation is worth it (samples)
ACCUMULATION_STEPS = 4  # micro-batches per all-reduce proposed
REDUCE_BROADCAST_PRIOR_GAIN = 0.02  # facts only: a second dependent collective per step
ONE_COLLECTIVE_SAVING = 0.5  # share of Reduce + Broadcast time one all_reduce saves


@rule("distributed.comm_bound", risk="distributed")
def distributed_comm_bound(evidence: RunEvidence) -> Finding | None:
    """What: communication kernels take a large share of GPU time and computation does not
    overlap them.

    Why: exposed all-reduce/all-gather time adds directly to the step; DDP can hide it under
    the backward pass only when buckets are ready early enough.

    Fix: tune `bucket_cap_mb`, accumulate gradients (fewer syncs), compress gradients, or
    restructure so communication overlaps compute.
    """
    best: Finding | None = None
    for trace in evidence.traces:
        span = trace.temporal.kernel_span_us
        exposed = trace.kernel_breakdown.get("COMMUNICATION", {}).get("us", 0.0)
        overlap = trace.comm_comp_overlap_pct
        if not span or overlap is None:
            continue
        share = exposed / span
        if share < COMM_SHARE_MIN or overlap > COMM_OVERLAP_MAX:
            continue
        if best is None or share * COMM_RECOVERABLE > best.estimated_gain:
            best = finding(
                "distributed.comm_bound",
                title=f"Exposed communication takes {share:.0%} of GPU time (rank {trace.rank})",
                confidence=0.6,
                gain=share * COMM_RECOVERABLE,
                basis=f"exposed communication share x {COMM_RECOVERABLE:.0%} hideable by overlap",
                evidence=[
                    Evidence(
                        "communication not overlapped", exposed, "µs", f"trace rank {trace.rank}"
                    ),
                    Evidence("kernel span", span, "µs", "trace"),
                    Evidence("communication overlapped by compute", overlap, "%", "trace"),
                ],
                fix=Fix(
                    text="Overlap gradient communication with the backward pass; sync less often.",
                    snippet="DistributedDataParallel(model, bucket_cap_mb=50)\n"
                    "with model.no_sync():  # accumulate k-1 micro-batches\n    loss.backward()",
                ),
            )
    return best


@rule("distributed.straggler", risk="distributed")
def distributed_straggler(evidence: RunEvidence) -> Finding | None:
    """What: one rank's steps are consistently slower than the other ranks'.

    Why: collectives wait for the slowest rank; every other rank idles for the difference.

    Fix: look at that rank's input pipeline and host (CPU contention, thermal throttling, a
    slower link).
    """
    found = _straggler_from_steps(evidence) or _straggler_from_traces(evidence)
    if found is None:
        return None
    slow_rank, ratio, gain, items, source = found
    phase = _straggler_phase(evidence, slow_rank)
    where = ""
    if phase is not None:
        name, extra = phase
        items.append(
            Evidence(
                f"rank {slow_rank}'s extra {name} phase (median)",
                extra,
                "s",
                "metrics (step anatomy)",
            )
        )
        where = f": {extra * 1e3:.1f} ms more {name.replace('_', ' ')} per step"
    return finding(
        "distributed.straggler",
        title=f"Rank {slow_rank} is {ratio:.2f}x slower than the median rank{where}",
        confidence=0.6 if source == "metrics" else 0.4,
        gain=gain,
        basis="the slow rank's excess over the median rank (which every rank waits for), "
        "as a share of its step",
        evidence=items,
        fix=Fix(text=f"Inspect rank {slow_rank}'s host and input pipeline.", snippet=""),
    )


Straggler = tuple[int, float, float, list[Evidence], str]  # rank, ratio, gain, evidence, source


def _straggler_phase(evidence: RunEvidence, slow_rank: int) -> tuple[str, float] | None:
    """The phase in which `slow_rank` spends the most more than the median rank (anatomy)."""
    anatomy = step_anatomy(evidence)
    if anatomy is None or len(anatomy.ranks) < 2:
        return None
    ranks = {r.rank: r.phases for r in anatomy.ranks}
    if slow_rank not in ranks:
        return None
    extra = {
        name: seconds - statistics.median(p.get(name, 0.0) for p in ranks.values())
        for name, seconds in ranks[slow_rank].items()
    }
    name = max(extra, key=lambda n: extra[n])
    return (name, extra[name]) if extra[name] > 0 else None


def _straggler_from_steps(evidence: RunEvidence) -> Straggler | None:
    """The agent's per-rank step times: one rank's median step well above the others'."""
    by_rank: dict[int, list[float]] = {}
    for step in evidence.steady_steps():
        by_rank.setdefault(step.rank, []).append(step.duration_s)
    if len(by_rank) < 2:
        return None
    medians = {rank: statistics.median(v) for rank, v in by_rank.items() if v}
    typical = statistics.median(medians.values())
    slow = max(medians, key=lambda r: medians[r])
    ratio = medians[slow] / typical if typical else 0.0
    if ratio < STRAGGLER_RATIO_MIN:
        return None
    items = [
        Evidence("slowest rank median step", medians[slow], "s", "metrics"),
        Evidence("median over ranks", typical, "s", "metrics"),
    ]
    return slow, ratio, 1 - 1 / ratio, items, "metrics"


def _straggler_from_traces(evidence: RunEvidence) -> Straggler | None:
    """Rank traces of one window: collectives make step times equal, so compare the busy
    (computation) time each rank needs; the others wait for the one that needs the most."""
    traces = {t.rank: t for t in evidence.traces if t.temporal.compute_us > 0}
    busy = {rank: t.temporal.compute_us for rank, t in traces.items()}
    if len(busy) < 2:
        return None
    typical = statistics.median(busy.values())
    slow = max(busy, key=lambda r: busy[r])
    ratio = busy[slow] / typical if typical else 0.0
    if ratio < STRAGGLER_RATIO_MIN:
        return None
    items = [
        Evidence("slowest rank computation time", busy[slow], "µs", f"trace rank {slow}"),
        Evidence("median over ranks", typical, "µs", "trace"),
    ]
    gain = (busy[slow] - typical) / traces[slow].temporal.kernel_span_us
    return slow, ratio, gain, items, "trace"


@rule("distributed.grad_accumulation", risk="distributed")
def distributed_grad_accumulation(evidence: RunEvidence) -> Finding | None:
    """What: training steps spend a large share of GPU time in gradient all-reduces that
    computation does not hide, at a small per-rank batch.

    Why: DDP all-reduces every gradient once per backward pass; at a small batch the compute
    per all-reduce is too short to hide it. Accumulating k micro-batches locally (`no_sync()`)
    and all-reducing once cuts the communication per sample by k, at the same effective batch.

    Fix: `with model.no_sync():` for k-1 of every k micro-batches, then a synchronised
    backward and the optimizer step (scale the loss by 1/k).
    """
    batch = min(
        (b for b in (d.get("batch_size") for d in evidence.dataloaders()) if isinstance(b, int)),
        default=None,
    )
    if batch is not None and batch > SMALL_BATCH_MAX:
        return None
    best: tuple[float, TraceSummary] | None = None
    for trace in evidence.traces:
        allreduce = trace.collectives.get("AllReduce")
        span = trace.temporal.kernel_span_us
        if not trace.training or not allreduce or not span:
            continue
        share = allreduce["exposed_us"] / span
        if share >= ALLREDUCE_SHARE_MIN and (best is None or share > best[0]):
            best = (share, trace)
    if best is None:
        return None
    share, trace = best
    allreduce = trace.collectives["AllReduce"]
    items = [
        Evidence(
            "exposed all-reduce time", allreduce["exposed_us"], "µs", f"trace rank {trace.rank}"
        ),
        Evidence("share of the kernel span", share, "fraction", "trace"),
        Evidence(
            "all-reduce kernels per step", per_step(trace, allreduce["count"]), "calls", "trace"
        ),
    ]
    if batch is not None:
        items.append(Evidence("DataLoader batch size", batch, "samples", "facts"))
    k = ACCUMULATION_STEPS
    return finding(
        "distributed.grad_accumulation",
        title=f"Gradient all-reduces take {share:.0%} of GPU time, unhidden",
        confidence=0.5 if batch is None else 0.6,
        gain=share * (1 - 1 / k),
        basis=f"measured exposed all-reduce share ({share:.1%}) x (1 - 1/{k}) "
        f"for one all-reduce per {k} micro-batches",
        evidence=items,
        fix=Fix(
            text=f"Accumulate gradients over {k} micro-batches and all-reduce once.",
            snippet=f"for i, batch in enumerate(loader):\n"
            f"    ctx = model.no_sync() if (i + 1) % {k} else contextlib.nullcontext()\n"
            f"    with ctx:\n        (loss_fn(model(batch)) / {k}).backward()\n"
            f"    if (i + 1) % {k} == 0:\n        optimizer.step(); optimizer.zero_grad()",
        ),
    )


@rule("distributed.reduce_then_broadcast", risk="distributed")
def distributed_reduce_then_broadcast(evidence: RunEvidence) -> Finding | None:
    """What: every step a tensor is `dist.reduce`d to one rank and then broadcast back.

    Why: two collectives, the second waiting for the first, with the root rank's link carrying
    everything twice; `all_reduce` gives every rank the reduced tensor in one collective
    (ring or tree, bandwidth spread over all links).

    Fix: `dist.all_reduce(tensor)` in place of `dist.reduce(tensor, dst)` +
    `dist.broadcast(tensor, src)`.
    """
    per_step_pairs = float(evidence.fact("distributed.reduce_then_broadcast_per_step", 0) or 0)
    items: list[Evidence] = []
    gain, basis = (
        REDUCE_BROADCAST_PRIOR_GAIN,
        (
            f"prior: {REDUCE_BROADCAST_PRIOR_GAIN:.0%} (two dependent collectives per step; "
            "no trace to measure them)"
        ),
    )
    if per_step_pairs >= 1:
        items.append(
            Evidence("reduce then broadcast of one tensor", per_step_pairs, "per step", "facts")
        )
    for trace in evidence.traces:
        reduce, broadcast = trace.collectives.get("Reduce"), trace.collectives.get("Broadcast")
        span = trace.temporal.kernel_span_us
        if not reduce or not broadcast or not span or not trace.steps:
            continue
        if per_step(trace, reduce["count"]) < 1 or broadcast["count"] < reduce["count"]:
            continue
        exposed = reduce["exposed_us"] + broadcast["exposed_us"]
        gain = exposed / span * ONE_COLLECTIVE_SAVING
        basis = (
            f"measured exposed Reduce + Broadcast share ({exposed / span:.1%}) x "
            f"{ONE_COLLECTIVE_SAVING:.0%} (one collective instead of two)"
        )
        items.append(
            Evidence("Reduce + Broadcast exposed time", exposed, "µs", f"trace rank {trace.rank}")
        )
        break
    if not items:
        return None
    return finding(
        "distributed.reduce_then_broadcast",
        title="dist.reduce followed by dist.broadcast where all_reduce is meant",
        confidence=0.8 if per_step_pairs >= 1 else 0.5,
        gain=gain,
        basis=basis,
        evidence=items,
        fix=Fix(
            text="Use one all_reduce.",
            snippet="dist.all_reduce(tensor, op=dist.ReduceOp.SUM)\n"
            "# instead of: dist.reduce(tensor, dst=0); dist.broadcast(tensor, src=0)",
        ),
    )
