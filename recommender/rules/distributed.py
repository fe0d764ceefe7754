"""Distributed rules: how ranks cooperate (same math, different topology)."""

from __future__ import annotations

import statistics

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import per_step, ranks_per_host

DATAPARALLEL_PRIOR_GAIN = 0.3  # DDP vs DataParallel: GIL-bound scatter/replicate/gather
WRONG_BACKEND_PRIOR_GAIN = 0.3  # gloo vs NCCL for GPU collectives (no trace)
NCCL_SPEEDUP = 3.0  # prior: NCCL collectives vs gloo's host-staged ones, same payload
RANK_DEVICE_PRIOR_GAIN = 0.3  # two ranks sharing one GPU at least halve each one's speed
FIND_UNUSED_PRIOR_GAIN = 0.05  # an extra autograd-graph traversal per step
COMM_SHARE_MIN = 0.10  # exposed (non-overlapped) communication, fraction of GPU time
COMM_OVERLAP_MAX = 50.0  # % of communication overlapped by compute
COMM_RECOVERABLE = 0.5  # share of exposed communication better overlap can hide
STRAGGLER_RATIO_MIN = 1.2  # a rank's median step / median over ranks
ALLREDUCE_SHARE_MIN = 0.10  # exposed all-reduce time, fraction of the kernel span
SMALL_BATCH_MAX = 64  # per-rank DataLoader batch at which accumulation is worth it (samples)
ACCUMULATION_STEPS = 4  # micro-batches per all-reduce proposed
REDUCE_BROADCAST_PRIOR_GAIN = 0.02  # facts only: a second dependent collective per step
ONE_COLLECTIVE_SAVING = 0.5  # share of Reduce + Broadcast time one all_reduce saves
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@rule("distributed.dataparallel", risk="distributed")
def distributed_dataparallel(evidence: RunEvidence) -> Finding | None:
    """What: the model is wrapped in `nn.DataParallel`.

    Why: DataParallel is single-process: every step it scatters inputs, replicates the model
    and gathers outputs from one Python thread under the GIL; the first GPU does extra work.

    On a CPU run DataParallel simply calls the module: nothing is lost yet, so no gain is
    claimed; the finding says what happens once the script runs on GPUs.

    Fix: one process per GPU with `DistributedDataParallel` (launched by `torchrun`).
    """
    mode = evidence.fact("parallel.mode")
    markers = [t for t in evidence.traces if t.markers.get("Broadcast") and t.markers.get("Gather")]
    if mode != "dataparallel" and not markers:
        return None
    items = []
    if mode == "dataparallel":
        items.append(Evidence("parallel.mode", mode, "", "facts"))
    if markers:
        items.append(
            Evidence(
                "Broadcast/Gather per trace", markers[0].markers["Broadcast"], "calls", "trace"
            )
        )
    on_gpu = evidence.uses_cuda()
    if not on_gpu:
        items.append(Evidence("CUDA in use", False, "flag", "facts"))
    return finding(
        "distributed.dataparallel",
        title="nn.DataParallel in use: one process drives every GPU"
        if on_gpu
        else "nn.DataParallel in use: a no-op on this CPU run, a bottleneck on GPUs",
        confidence=(0.9 if mode == "dataparallel" else 0.6) if on_gpu else 0.3,
        gain=DATAPARALLEL_PRIOR_GAIN if on_gpu else 0.0,
        basis=f"prior: DDP typically recovers {DATAPARALLEL_PRIOR_GAIN:.0%} over DataParallel"
        if on_gpu
        else "no gain on a CPU run (DataParallel only calls the module without GPUs)",
        evidence=items,
        fix=Fix(
            text="Run one process per GPU with DistributedDataParallel.",
            snippet="torch.distributed.init_process_group('nccl')\n"
            "model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])\n"
            "# launch: torchrun --nproc-per-node=N train.py",
        ),
    )


@rule("distributed.backend", risk="distributed")
def distributed_backend(evidence: RunEvidence) -> Finding | None:
    """What: distributed training on CUDA with a backend other than NCCL.

    Why: gloo moves GPU tensors through host memory and TCP; NCCL uses NVLink/PCIe peer
    copies and InfiniBand/RDMA directly from GPU memory.

    Fix: `init_process_group(backend="nccl")` for GPU tensors.
    """
    backend = evidence.fact("distributed.backend")
    if not backend or not evidence.uses_cuda() or "nccl" in str(backend).lower():
        return None
    gain = WRONG_BACKEND_PRIOR_GAIN
    basis = f"prior: {WRONG_BACKEND_PRIOR_GAIN:.0%} of step time in slower collectives (no trace)"
    items = [Evidence("distributed.backend", str(backend), "", "facts")]
    spans = [t for t in evidence.traces if t.temporal.kernel_span_us and t.collectives]
    if spans:  # measured: the exposed collective time NCCL would shorten
        trace = max(spans, key=lambda t: _exposed_comm_share(t))
        share = _exposed_comm_share(trace)
        gain = share * (1 - 1 / NCCL_SPEEDUP)
        basis = (
            f"measured exposed collective share ({share:.1%}) x (1 - 1/{NCCL_SPEEDUP:g}) "
            "(prior speed-up of NCCL over host-staged collectives)"
        )
        items.append(Evidence("exposed collective share", share, "fraction", "trace"))
    return finding(
        "distributed.backend",
        title=f"GPU collectives run over {backend}, not NCCL",
        confidence=0.9,
        gain=gain,
        basis=basis,
        evidence=items,
        fix=Fix(
            text="Use NCCL for CUDA tensors.", snippet='dist.init_process_group(backend="nccl")'
        ),
    )


def _exposed_comm_share(trace: TraceSummary) -> float:
    exposed = sum(row["exposed_us"] for row in trace.collectives.values())
    return exposed / trace.temporal.kernel_span_us if trace.temporal.kernel_span_us else 0.0


@rule("distributed.rank_device_mismatch", risk="distributed")
def distributed_rank_device_mismatch(evidence: RunEvidence) -> Finding | None:
    """What: a rank's LOCAL_RANK differs from the CUDA device it uses.

    Why: ranks end up sharing a GPU (and leaving another idle), or NCCL maps its rings wrongly.

    The device is the one the training thread uses (`cuda.training_device`, read in the
    optimizer step): CUDA's current device is per thread, and any other thread sees cuda:0.

    Fix: `torch.cuda.set_device(local_rank)` before `init_process_group`; device order = rank order.
    """
    local_rank, device = evidence.fact("env.local_rank"), evidence.fact("cuda.training_device")
    try:
        local, current = int(local_rank), int(device)
    except (TypeError, ValueError):
        return None
    restricted = evidence.fact("env.cuda_visible_devices") not in (None, "")
    # With one visible device per rank (CUDA_VISIBLE_DEVICES), cuda:0 is right for every rank.
    if local == current or (restricted and current == 0):
        return None
    return finding(
        "distributed.rank_device_mismatch",
        title=f"LOCAL_RANK {local} runs on cuda:{current}",
        confidence=0.8,
        gain=RANK_DEVICE_PRIOR_GAIN,
        basis="prior: ranks sharing a GPU lose at least a third of their speed",
        evidence=[
            Evidence("LOCAL_RANK", local, "", "facts"),
            Evidence("CUDA device of the training thread", current, "", "facts"),
        ],
        fix=Fix(
            text="Bind each rank to its GPU before initialising the process group.",
            snippet="local_rank = int(os.environ['LOCAL_RANK'])\ntorch.cuda.set_device(local_rank)",
        ),
    )


@rule("distributed.loopback_init", risk="distributed")
def distributed_loopback_init(evidence: RunEvidence) -> Finding | None:
    """What: a multi-node job whose rendezvous address is the loopback interface.

    Why: 127.0.0.1 on another node is that node itself; ranks never meet and the job hangs
    until the timeout.

    Fix: set MASTER_ADDR / init_method to the master host's reachable address.
    """
    world = evidence.fact("distributed.world_size", evidence.fact("env.world_size"))
    address = str(evidence.fact("distributed.init_method", "")) + str(
        evidence.fact("env.master_addr", "")
    )
    try:
        world_size = int(world)
    except (TypeError, ValueError):
        return None
    if world_size <= ranks_per_host(evidence) or not any(a in address for a in LOOPBACK):
        return None
    return finding(
        "distributed.loopback_init",
        title="Multi-node job rendezvous on a loopback address",
        confidence=0.8,
        gain=0.0,
        basis="a hang, not a slowdown: no time estimate (critical)",
        critical=True,
        evidence=[
            Evidence("world size", world_size, "ranks", "facts"),
            Evidence("ranks on this host", ranks_per_host(evidence), "ranks", "facts"),
            Evidence("rendezvous address", address, "", "facts"),
        ],
        fix=Fix(
            text="Point every node at the master's address.",
            snippet="MASTER_ADDR=10.0.0.7 torchrun ...",
        ),
    )


@rule("distributed.find_unused_parameters", risk="distributed")
def distributed_find_unused_parameters(evidence: RunEvidence) -> Finding | None:
    """What: DDP runs with `find_unused_parameters=True`.

    Why: DDP then walks the autograd graph after every forward to find parameters that will get
    no gradient; when there are none, this is pure overhead (and it delays bucketing).

    The agent records which parameters got no gradient in the first steps; the rule fires only
    when that check ran and found none (with unused parameters the flag is required: turning it
    off makes DDP fail with "Expected to have finished reduction ...").

    Fix: `find_unused_parameters=False` when every parameter gets a gradient each step.
    """
    if evidence.fact("ddp.find_unused_parameters") is not True:
        return None
    unused, checked = (
        evidence.fact("ddp.unused_parameters"),
        evidence.fact("ddp.unused_checked_steps"),
    )
    if unused != 0 or not checked:
        return None  # unused parameters exist, or nobody checked: the flag may be needed
    return finding(
        "distributed.find_unused_parameters",
        title="DDP searches for unused parameters every step, and there are none",
        confidence=0.7,
        gain=FIND_UNUSED_PRIOR_GAIN,
        basis=f"prior: {FIND_UNUSED_PRIOR_GAIN:.0%} for the extra graph traversal",
        evidence=[
            Evidence("ddp.find_unused_parameters", True, "flag", "facts"),
            Evidence("parameters without a gradient", 0, "parameters", "facts"),
            Evidence("steps checked", checked, "steps", "facts"),
        ],
        fix=Fix(
            text="Turn the search off if every parameter gets a gradient.",
            snippet="DistributedDataParallel(\n"
            "    model, device_ids=[local_rank], find_unused_parameters=False\n)",
        ),
    )


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
    return finding(
        "distributed.straggler",
        title=f"Rank {slow_rank} is {ratio:.2f}x slower than the median rank",
        confidence=0.6 if source == "metrics" else 0.4,
        gain=gain,
        basis="the slow rank's excess over the median rank (which every rank waits for), "
        "as a share of its step",
        evidence=items,
        fix=Fix(text=f"Inspect rank {slow_rank}'s host and input pipeline.", snippet=""),
    )


Straggler = tuple[int, float, float, list[Evidence], str]  # rank, ratio, gain, evidence, source


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
