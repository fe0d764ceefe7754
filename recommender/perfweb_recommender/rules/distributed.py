"""Distributed rules about how ranks are set up (same math, different topology): DataParallel,
the backend, ranks sharing a device, a loopback rendezvous, find_unused_parameters.

The rules read from measured communication and step times are in distributed_comm.py."""

from __future__ import annotations

from perfweb_recommender.analysis.summary import TraceSummary
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import ranks_per_host, ranks_span_hosts

DATAPARALLEL_PRIOR_GAIN = 0.3  # DDP vs DataParallel: GIL-bound scatter/replicate/gather
WRONG_BACKEND_PRIOR_GAIN = 0.3  # gloo vs NCCL for GPU collectives (no trace)
NCCL_SPEEDUP = 3.0  # prior: NCCL collectives vs gloo's host-staged ones, same payload
RANK_DEVICE_PRIOR_GAIN = 0.3  # two ranks sharing one GPU at least halve each one's speed
FIND_UNUSED_PRIOR_GAIN = 0.05  # an extra autograd-graph traversal per step
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
    if not any(a in address for a in LOOPBACK):
        return None
    if not ranks_span_hosts(evidence, world_size=world_size):  # one host: loopback is right
        return None
    hosts = evidence.ranks_by_host()
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
            Evidence("hosts the agents reported from", max(1, len(hosts)), "hosts", "agents"),
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
