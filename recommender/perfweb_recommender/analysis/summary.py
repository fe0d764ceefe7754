"""All analyses of one rank's trace, gathered in a `TraceSummary` (what the rules read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfweb_recommender.analysis import gpu_time, host_device, steps
from perfweb_recommender.analysis.cpu_attention import cpu_attention
from perfweb_recommender.analysis.cpu_collectives import cpu_all_reduce
from perfweb_recommender.analysis.module_time import module_time
from perfweb_recommender.trace.model import RankTrace

# CPU operators whose presence is evidence for a diagnosis (counted per trace).
MARKER_OPS = (
    "Broadcast",  # nn.DataParallel replicates the module every forward
    "ReduceAddCoalesced",
    "Gather",
    "Scatter",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::bmm",
    "aten::softmax",
    "aten::_softmax",
    "aten::baddbmm",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::cudnn_convolution",
    "aten::convolution",
    "aten::mm",
    "aten::addmm",
)
GENERATED_SHARE_COMPILED = 0.05  # share of kernel time in Triton kernels that means "compiled"


@dataclass
class TraceSummary:
    """The analysed form of one rank's trace: numbers only, JSON-ready."""

    rank: int
    source: str
    temporal: gpu_time.Temporal
    comm_comp_overlap_pct: float | None
    idle_breakdown: dict[str, dict[str, dict[str, float]]]
    kernel_breakdown: dict[str, dict[str, float]]
    steps: list[dict[str, float]]
    step_shares: dict[str, float]
    memcpy: dict[str, dict[str, float]]
    h2d: dict[str, float]
    sync_points: dict[str, dict[str, float]]
    allocator: dict[str, dict[str, float]]
    launch: dict[str, Any]
    tensor_cores: dict[str, float]
    cpu_ops: dict[str, float] = field(default_factory=dict)
    module_time: dict[str, float] = field(default_factory=dict)  # analysis.module_time
    # the run's recorded operator shapes for the replay (perfweb_recommender.replay.plan);
    # filled from the trace file by whoever reads it, not by `summarize`
    replay_plan: dict[str, Any] = field(default_factory=dict)
    markers: dict[str, int] = field(default_factory=dict)
    compile: dict[str, float] = field(default_factory=dict)
    step_timeline: dict[str, float] | None = None  # busy/idle inside GPU-side ProfilerSteps
    collectives: dict[str, dict[str, float]] = field(default_factory=dict)
    training: bool = False  # the trace holds backward passes (autograd engine events)
    cpu_events: int = -1  # CPU operator / annotation events (0: a GPU-only trace); -1: unknown
    cpu_attention: dict[str, float] = field(default_factory=dict)  # analysis.cpu_attention
    cpu_all_reduce: dict[str, float] = field(default_factory=dict)  # gloo: cpu_collectives
    world_size: int | None = None
    backend: str | None = None
    compute_capability: tuple[int, int] | None = None
    degraded: str | None = None  # over the memory budget: what the analyses did not see

    @property
    def steady_step_count(self) -> int:
        """Number of steps the per-step numbers are averaged over."""
        return len(steps.steady_steps(self.steps))

    @property
    def mean_step_us(self) -> float | None:
        """Mean duration of the steady steps (µs), None without steps."""
        rows = steps.steady_steps(self.steps)
        return sum(r["duration_us"] for r in rows) / len(rows) if rows else None

    @property
    def compiled(self) -> bool:
        """Whether the traced model already runs torch.compile'd code (or Triton kernels)."""
        return bool(self.compile.get("compiled_regions")) or (
            self.compile.get("generated_kernel_share", 0.0) >= GENERATED_SHARE_COMPILED
        )

    def host_wait_share(self) -> float:
        """Share of all per-stream idle time that is host wait (GPU waiting on the CPU)."""
        causes = [c for stream in self.idle_breakdown.values() for c in stream.items()]
        idle = sum(v["us"] for _, v in causes)
        return sum(v["us"] for k, v in causes if k == "host_wait") / idle if idle else 0.0

    def as_json(self) -> dict[str, Any]:
        """The CLI's per-rank JSON object."""
        return {
            "source": self.source,
            "temporal_breakdown": self.temporal.as_dict(),
            "comm_comp_overlap_pct": (
                None if self.comm_comp_overlap_pct is None else round(self.comm_comp_overlap_pct, 2)
            ),
            "idle_breakdown": self.idle_breakdown,
            "kernel_breakdown": self.kernel_breakdown,
            "steps": self.steps,
            "step_shares": {k: round(v, 4) for k, v in self.step_shares.items()},
            "memcpy": self.memcpy,
            "h2d": self.h2d,
            "sync_points": self.sync_points,
            "allocator": self.allocator,
            "launch": self.launch,
            "tensor_cores": self.tensor_cores,
            "cpu_ops": self.cpu_ops,
            "module_time": {k: round(v, 3) for k, v in self.module_time.items()},
            "markers": self.markers,
            "compile": self.compile,
            "step_timeline": self.step_timeline,
            "collectives": self.collectives,
            "training": self.training,
            "cpu_events": self.cpu_events,
            "cpu_attention": self.cpu_attention,
            "cpu_all_reduce": self.cpu_all_reduce,
            "degraded": self.degraded,
        }


def summarize(trace: RankTrace) -> TraceSummary:
    """Run every analysis on one rank's trace."""
    window = gpu_time.analysis_window(trace)
    step_rows = steps.step_breakdown(trace)
    return TraceSummary(
        rank=trace.rank,
        source=trace.source,
        temporal=gpu_time.temporal_breakdown(window),
        comm_comp_overlap_pct=gpu_time.comm_comp_overlap_pct(window),
        idle_breakdown=gpu_time.idle_breakdown(window, trace),
        kernel_breakdown=gpu_time.kernel_breakdown(window),
        steps=step_rows,
        step_shares=steps.category_shares(steps.steady_steps(step_rows)),
        memcpy=host_device.memcpy_stats(trace),
        h2d=host_device.h2d_serialisation(trace),
        sync_points=host_device.sync_points(trace),
        allocator=host_device.host_call_stats(trace, host_device.ALLOCATOR_CALLS),
        launch=host_device.launch_stats(trace, gpu_time.launch_times(trace.gpu, trace)),
        tensor_cores=host_device.tensor_core_stats(trace),
        cpu_ops=host_device.cpu_op_stats(trace),
        module_time=module_time(trace),
        markers={op: trace.cpu_op_counts[op] for op in MARKER_OPS if op in trace.cpu_op_counts},
        compile=host_device.compile_stats(trace),
        step_timeline=gpu_time.step_timeline(trace),
        collectives=host_device.collective_stats(trace),
        training=trace.backward_ops > 0,
        cpu_events=len(trace.cpu),
        cpu_attention=cpu_attention(trace),
        cpu_all_reduce=cpu_all_reduce(trace),
        world_size=trace.world_size,
        backend=trace.backend,
        compute_capability=trace.compute_capability,
        degraded=trace.degraded,
    )
