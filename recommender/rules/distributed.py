"""Distributed rules: how ranks cooperate (same math, different topology)."""

from __future__ import annotations

import statistics

from recommender.evidence import RunEvidence
from recommender.rules.base import Evidence, Finding, Fix, finding, rule
from recommender.rules.signals import ranks_per_host

DATAPARALLEL_PRIOR_GAIN = 0.3  # DDP vs DataParallel: GIL-bound scatter/replicate/gather
WRONG_BACKEND_PRIOR_GAIN = 0.3  # gloo vs NCCL for GPU collectives
RANK_DEVICE_PRIOR_GAIN = 0.3  # two ranks sharing one GPU at least halve each one's speed
FIND_UNUSED_PRIOR_GAIN = 0.05  # an extra autograd-graph traversal per step
COMM_SHARE_MIN = 0.10  # exposed (non-overlapped) communication, fraction of GPU time
COMM_OVERLAP_MAX = 50.0  # % of communication overlapped by compute
COMM_RECOVERABLE = 0.5  # share of exposed communication better overlap can hide
STRAGGLER_RATIO_MIN = 1.2  # a rank's median step / median over ranks
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@rule("distributed.dataparallel", risk="distributed")
def distributed_dataparallel(evidence: RunEvidence) -> Finding | None:
    """What: the model is wrapped in `nn.DataParallel`.

    Why: DataParallel is single-process: every step it scatters inputs, replicates the model
    and gathers outputs from one Python thread under the GIL; the first GPU does extra work.

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
    return finding(
        "distributed.dataparallel",
        title="nn.DataParallel in use: one process drives every GPU",
        confidence=0.9 if mode == "dataparallel" else 0.6,
        gain=DATAPARALLEL_PRIOR_GAIN,
        basis=f"prior: DDP typically recovers {DATAPARALLEL_PRIOR_GAIN:.0%} over DataParallel",
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
    return finding(
        "distributed.backend",
        title=f"GPU collectives run over {backend}, not NCCL",
        confidence=0.9,
        gain=WRONG_BACKEND_PRIOR_GAIN,
        basis=f"prior: {WRONG_BACKEND_PRIOR_GAIN:.0%} of step time in slower collectives",
        evidence=[Evidence("distributed.backend", str(backend), "", "facts")],
        fix=Fix(
            text="Use NCCL for CUDA tensors.", snippet='dist.init_process_group(backend="nccl")'
        ),
    )


@rule("distributed.rank_device_mismatch", risk="distributed")
def distributed_rank_device_mismatch(evidence: RunEvidence) -> Finding | None:
    """What: a rank's LOCAL_RANK differs from the CUDA device it uses.

    Why: ranks end up sharing a GPU (and leaving another idle), or NCCL maps its rings wrongly.

    Fix: `torch.cuda.set_device(local_rank)` before `init_process_group`; device order = rank order.
    """
    local_rank, device = evidence.fact("env.local_rank"), evidence.fact("cuda.current_device")
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
            Evidence("current CUDA device", current, "", "facts"),
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
        basis="a hang, not a slowdown: no time estimate",
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

    Fix: `find_unused_parameters=False` when every parameter gets a gradient each step.
    """
    if evidence.fact("ddp.find_unused_parameters") is not True:
        return None
    return finding(
        "distributed.find_unused_parameters",
        title="DDP searches for unused parameters every step",
        confidence=0.5,
        gain=FIND_UNUSED_PRIOR_GAIN,
        basis=f"prior: {FIND_UNUSED_PRIOR_GAIN:.0%} for the extra graph traversal",
        evidence=[Evidence("ddp.find_unused_parameters", True, "flag", "facts")],
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
