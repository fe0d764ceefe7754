"""Host-device interplay: memcpy kinds and bandwidth, synchronisation points, kernel launch
statistics, allocator calls and tensor-core use."""

from __future__ import annotations

import numpy as np

from perfweb_recommender.analysis.intervals import merge, overlap_length, total, union_length
from perfweb_recommender.trace.classify import (
    collective_kind,
    fusible_family,
    is_conv_kernel,
    is_dense_math_kernel,
    is_fp32_simt_kernel,
    is_generated_kernel,
    is_tensor_core_kernel,
    memcpy_kind,
)
from perfweb_recommender.trace.model import (
    CPU_DATALOADER,
    CPU_OP,
    KIND_KERNEL,
    KIND_MEMCPY,
    TYPE_COMMUNICATION,
    TYPE_COMPUTATION,
    RankTrace,
)

SHORT_KERNEL_US = 10.0  # kernels shorter than this are dominated by launch overhead
SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
)
BLOCKING_OPS = ("aten::item", "aten::_local_scalar_dense")
# CPU operators whose work PyTorch splits over the intra-op threads: the GEMMs and
# convolutions, forward and backward (oneDNN / the BLAS). Nested ones (aten::linear holds an
# aten::addmm) are counted once: the share is the union of their intervals.
PARALLEL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::mkldnn_convolution",
        "aten::_slow_conv2d_forward",
        "aten::_slow_conv2d_backward",
        "aten::convolution_backward",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    }
)
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "hipMalloc", "hipFree")


def memcpy_stats(trace: RankTrace) -> dict[str, dict[str, float]]:
    """Per "direction host-kind" (e.g. "HtoD pageable"): count, bytes, µs and GB/s."""
    gpu = trace.gpu
    copies = gpu.kind == KIND_MEMCPY
    size = len(trace.gpu_names)
    ids = gpu.name_id[copies]
    counts = np.bincount(ids, minlength=size)
    nbytes = np.bincount(ids, weights=gpu.nbytes[copies].astype(np.float64), minlength=size)
    micros = np.bincount(ids, weights=gpu.dur[copies], minlength=size)
    out: dict[str, dict[str, float]] = {}
    for name_id in np.flatnonzero(counts):
        direction, host = memcpy_kind(trace.gpu_names[name_id])
        row = out.setdefault(f"{direction} {host}", {"count": 0, "bytes": 0, "us": 0.0})
        row["count"] += int(counts[name_id])
        row["bytes"] += int(nbytes[name_id])
        row["us"] += float(micros[name_id])
    for row in out.values():
        row["gbps"] = round(row["bytes"] / (row["us"] * 1e3), 3) if row["us"] > 0 else 0.0
        row["us"] = round(row["us"], 3)
    return out


def h2d_serialisation(trace: RankTrace) -> dict[str, float]:
    """Host-to-device copy time on streams that run compute, and how much of it overlaps compute.

    A copy on the compute stream cannot overlap that stream's kernels; when little of the H2D
    time overlaps any computation, the GPU waits for the copies.
    """
    gpu = trace.gpu
    compute = gpu.gpu_type == TYPE_COMPUTATION
    compute_streams = np.unique(gpu.stream[compute])
    h2d_name = np.array(["HtoD" in name for name in trace.gpu_names] + [False], dtype=bool)
    h2d = (gpu.kind == KIND_MEMCPY) & h2d_name[gpu.name_id]
    on_compute = h2d & np.isin(gpu.stream, compute_streams)
    copies = merge(gpu.ts[on_compute], gpu.end[on_compute])
    copy_us = total(*copies)
    overlapped = overlap_length(copies, merge(gpu.ts[compute], gpu.end[compute]))
    return {
        "h2d_on_compute_stream_us": round(copy_us, 3),
        "h2d_overlapped_us": round(overlapped, 3),
        "h2d_total_us": round(total(*merge(gpu.ts[h2d], gpu.end[h2d])), 3),
    }


def host_call_stats(trace: RankTrace, names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Count and total host time (µs) of the named runtime calls present in the trace."""
    wanted = {i: n for i, n in enumerate(trace.runtime_names) if n in names}
    out: dict[str, dict[str, float]] = {}
    for name_id, name in wanted.items():
        mask = trace.host.name_id == name_id
        out[name] = {
            "count": int(mask.sum()),
            "us": round(float(trace.host.dur[mask].sum()), 3),
        }
    return out


def sync_points(trace: RankTrace) -> dict[str, dict[str, float]]:
    """Blocking synchronisations: runtime sync calls and `.item()`-style scalar reads."""
    out = host_call_stats(trace, SYNC_CALLS)
    # `.item()` runs aten::item -> aten::_local_scalar_dense: count the inner op once.
    for op in reversed(BLOCKING_OPS):
        if op in trace.cpu_op_counts:
            out[op] = {"count": trace.cpu_op_counts[op], "us": 0.0}
            break
    return out


def launch_stats(trace: RankTrace, launch_ts: np.ndarray) -> dict[str, float | None]:
    """Kernel count, short-kernel share, median kernel and launch-delay times (µs)."""
    gpu = trace.gpu
    kernels = gpu.kind == KIND_KERNEL
    durations = gpu.dur[kernels]
    if durations.size == 0:
        return {"kernels": 0}
    short = durations < SHORT_KERNEL_US
    delays = (gpu.ts - launch_ts)[kernels]
    delays = delays[np.isfinite(delays)]
    return {
        "kernels": int(durations.size),
        "short_kernels": int(short.sum()),
        "short_kernel_share": round(float(short.mean()), 4),
        "short_kernel_time_us": round(float(durations[short].sum()), 3),
        "kernel_time_us": round(float(durations.sum()), 3),
        "median_kernel_us": round(float(np.median(durations)), 3),
        "median_launch_delay_us": round(float(np.median(delays)), 3) if delays.size else None,
        "p95_launch_delay_us": round(float(np.percentile(delays, 95)), 3) if delays.size else None,
    }


def tensor_core_stats(trace: RankTrace) -> dict[str, float]:
    """Dense-math (GEMM/conv) kernel time and the tensor-core and fp32-SIMT shares of it; the
    shares of kernel time in convolutions, softmax/batched GEMMs and the fusible eager families
    (`elementwise_share`, `normalisation_share`, `concat_share`)."""
    gpu = trace.gpu
    kernels = np.flatnonzero(gpu.kind == KIND_KERNEL)
    per_name = np.bincount(
        gpu.name_id[kernels], weights=gpu.dur[kernels], minlength=len(trace.gpu_names)
    )
    all_kernels = float(per_name.sum())
    dense = tensor = simt = conv = attention = 0.0
    fusible = {"elementwise": 0.0, "normalisation": 0.0, "concat": 0.0}
    for name_id in np.flatnonzero(per_name):
        name = trace.gpu_names[name_id]
        lowered = name.lower()
        if "softmax" in lowered or "batched" in lowered or "bmm" in lowered:
            attention += per_name[name_id]
        if is_conv_kernel(name):
            conv += per_name[name_id]
        family = fusible_family(name)
        if family is not None:
            fusible[family] += per_name[name_id]
        if not is_dense_math_kernel(name):
            continue
        dense += per_name[name_id]
        if is_tensor_core_kernel(name):
            tensor += per_name[name_id]
        elif is_fp32_simt_kernel(name):
            simt += per_name[name_id]
    return {
        "kernel_us": round(all_kernels, 3),
        "dense_math_us": round(float(dense), 3),
        "dense_math_share": round(float(dense / all_kernels), 4) if all_kernels else 0.0,
        "tensor_core_share": round(float(tensor / dense), 4) if dense else 0.0,
        "fp32_simt_share": round(float(simt / dense), 4) if dense else 0.0,
        "conv_share": round(float(conv / all_kernels), 4) if all_kernels else 0.0,
        "softmax_bmm_share": round(float(attention / all_kernels), 4) if all_kernels else 0.0,
        **{
            f"{family}_share": round(float(us / all_kernels), 4) if all_kernels else 0.0
            for family, us in fusible.items()
        },
    }


def cpu_op_stats(trace: RankTrace) -> dict[str, float]:
    """CPU operators per profiled step and their median duration (µs): dispatch overhead;
    and the steps' share of time in GEMMs and convolutions (PARALLEL_OPS), what more intra-op
    threads speed up.

    Operators that start inside a DataLoader `__next__` are the input pipeline's (a
    torchvision transform's per-sample ToTensor/Normalize in a `num_workers=0` loader: most of
    the operators of a small model's step), not the model's: its wait is the DataLoader
    rules', and compiling the model does not fuse them, so they are not counted here.
    """
    cpu = trace.cpu
    ops = cpu.cpu_class == CPU_OP
    if not trace.steps or not ops.any():
        return {"ops_per_step": 0.0, "median_op_us": 0.0, "parallel_share": 0.0}
    first = min(s.ts for s in trace.steps)
    last = max(s.ts + s.dur for s in trace.steps)
    inside = ops & (cpu.ts >= first) & (cpu.ts < last)
    loading = cpu.cpu_class == CPU_DATALOADER
    if loading.any():
        starts, ends = merge(cpu.ts[loading], (cpu.ts + cpu.dur)[loading])
        span = np.searchsorted(starts, cpu.ts, side="right") - 1
        fetching = (span >= 0) & (cpu.ts < ends[np.maximum(span, 0)])
        inside &= ~fetching
    durations = cpu.dur[inside]
    parallel_ids = [i for i, name in enumerate(trace.cpu_names) if name in PARALLEL_OPS]
    parallel = inside & np.isin(cpu.name_id, parallel_ids)
    steps_us = sum(s.dur for s in trace.steps)
    parallel_us = union_length(cpu.ts[parallel], (cpu.ts + cpu.dur)[parallel])
    return {
        "ops_per_step": round(float(durations.size) / len(trace.steps), 1),
        "median_op_us": round(float(np.median(durations)), 3) if durations.size else 0.0,
        # the profiled steps' share of time in operators that split over intra-op threads
        "parallel_share": round(min(1.0, parallel_us / steps_us), 4) if steps_us > 0 else 0.0,
    }


def compile_stats(trace: RankTrace) -> dict[str, float]:
    """Signs that the model already runs compiled: torch.compile regions on the CPU side
    (CompiledFxGraph, Torch-Compiled Region, CompiledFunction) and the share of kernel time in
    generated (Triton) kernels."""
    gpu = trace.gpu
    kernels = gpu.kind == KIND_KERNEL
    total_us = float(gpu.dur[kernels].sum())
    generated = np.array([is_generated_kernel(n) for n in trace.gpu_names] + [False], dtype=bool)
    generated_us = float(gpu.dur[kernels & generated[gpu.name_id]].sum())
    return {
        "compiled_regions": trace.compiled_regions,
        "generated_kernel_share": round(generated_us / total_us, 4) if total_us else 0.0,
    }


def collective_stats(trace: RankTrace) -> dict[str, dict[str, float]]:
    """Per collective kind (AllReduce, Broadcast, Reduce, ...): kernel count, time (µs) and
    the time not overlapped by computation (exposed, µs)."""
    gpu = trace.gpu
    comm = gpu.gpu_type == TYPE_COMMUNICATION
    if not comm.any():
        return {}
    compute = gpu.gpu_type == TYPE_COMPUTATION
    computing = merge(gpu.ts[compute], gpu.end[compute])
    kinds = np.array([collective_kind(n) for n in trace.gpu_names] + [""], dtype=object)
    per_event = kinds[gpu.name_id]
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({str(k) for k in per_event[comm]}):
        mask = comm & (per_event == kind)
        union = merge(gpu.ts[mask], gpu.end[mask])
        busy = total(*union)
        out[kind] = {
            "count": int(mask.sum()),
            "us": round(busy, 3),
            "exposed_us": round(busy - overlap_length(union, computing), 3),
        }
    return out
