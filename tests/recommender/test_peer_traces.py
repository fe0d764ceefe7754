"""Every real trace in ../shared/peer-traces, diagnosed: the shares that matter and the findings.

One row per trace file (HTA's test traces and TraceLens' MI300X / B200 / MI210 traces), read
as: how much kernel time is dense math (GEMM/conv), how much of that runs on tensor/matrix
cores and how much in fp32 on CUDA cores, the communication share of busy GPU time, the share
of eager elementwise/normalisation/concat kernels, whether the model already runs compiled;
then the findings that must come first (in this order, best first) and those that must not
appear at all. Shares are fractions, checked to +-0.02.

Percentages of GPU time use one of two spans, named in SPAN below: `kernel` = first kernel
start to last kernel end (HTA's span, `temporal_breakdown`), `step` = inside the GPU-side
ProfilerStep annotations (TraceLens' span, `step_timeline`).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

import pytest

from perfweb_recommender.analysis.summary import TraceSummary, summarize
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules import diagnose
from perfweb_recommender.rules.base import Finding
from perfweb_recommender.rules.sharing import CLAIMS, available_time
from perfweb_recommender.trace.loader import load_trace
from tests.recommender.conftest import PEER

SHARE_TOLERANCE = 0.02
TRACELENS_TOLERANCE_PP = 1.0


@dataclass(frozen=True)
class Row:
    """What one real trace must read as."""

    trace: str
    dense: float  # GEMM/conv share of kernel time
    tensor: float  # of dense math: on tensor / matrix cores
    fp32: float  # of dense math: fp32 on CUDA cores
    comm: float  # communication share of busy GPU time (HTA kernel breakdown)
    fusible: float  # eager elementwise + normalisation + concat share of kernel time
    compiled: bool  # torch.compile'd regions or Triton kernels in the trace
    first: tuple[str, ...] = ()  # the top findings, best first
    never: tuple[str, ...] = ()  # findings that would be wrong here


GPU_ADVICE_ON_BF16 = ("precision.amp", "precision.tf32")  # already bf16 on matrix cores
# fmt: off
TABLE = [
    # V100, fp32 ResNet-50 training: cuDNN fp32 convolutions + sgemm -> AMP first
    Row("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        dense=0.64, tensor=0.00, fp32=1.00, comm=0.00, fusible=0.33, compiled=False,
        first=("precision.amp",), never=("launch.overhead", "distributed.comm_bound")),
    # V100 rank 1 of 2, compiled (CompiledFunction), 32% communication
    Row("hta/df_index_resolver/df_index_resolver.json.gz",
        dense=0.42, tensor=0.00, fp32=1.00, comm=0.32, fusible=0.21, compiled=True,
        first=("launch.overhead", "precision.amp", "distributed.grad_accumulation",
               "distributed.comm_bound"),
        never=("fusion.elementwise",)),
    # the same job before (A100) and after (V100) a change
    Row("hta/trace_diff/control/control.json.gz",
        dense=0.20, tensor=0.76, fp32=0.18, comm=0.41, fusible=0.22, compiled=False,
        first=("distributed.comm_bound",), never=("precision.amp", "fusion.elementwise")),
    Row("hta/trace_diff/test/test.json.gz",
        dense=0.27, tensor=0.00, fp32=0.97, comm=0.33, fusible=0.19, compiled=True,
        first=("precision.amp",), never=("fusion.elementwise",)),
    # two ranks of a 128-rank NCCL job: communication-bound
    Row("hta/trace_filter/sampled_rank-0.json.gz",
        dense=0.26, tensor=0.35, fp32=0.49, comm=0.70, fusible=0.04, compiled=False,
        first=("distributed.comm_bound",), never=("fusion.elementwise", "precision.amp")),
    Row("hta/trace_filter/sampled_rank-1.json.gz",
        dense=0.34, tensor=0.26, fp32=0.63, comm=0.62, fusible=0.03, compiled=False,
        first=("sync.host_device", "distributed.comm_bound"),
        never=("fusion.elementwise", "precision.amp")),
    Row("hta/timeline_analysis/sampled_rank-0.json.gz",
        dense=0.26, tensor=0.35, fp32=0.49, comm=0.70, fusible=0.04, compiled=False,
        first=("distributed.comm_bound",), never=("fusion.elementwise",)),
    # A100 rank 0 of 16, compiled, 44% communication, blocking syncs
    Row("hta/negative_queue_length_values_check/rank0.json.gz",
        dense=0.32, tensor=0.94, fp32=0.01, comm=0.44, fusible=0.09, compiled=True,
        first=("sync.host_device", "distributed.comm_bound"),
        never=GPU_ADVICE_ON_BF16 + ("fusion.elementwise",)),
    Row("hta/nccl_parser_config/nccl_data.json.gz",
        dense=0.25, tensor=0.94, fp32=0.06, comm=0.24, fusible=0.34, compiled=False,
        never=GPU_ADVICE_ON_BF16),
    # small A100 programs and toys: nothing large enough to advise on
    Row("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        dense=0.67, tensor=0.25, fp32=0.66, comm=0.00, fusible=0.15, compiled=False,
        never=("precision.amp", "fusion.elementwise")),
    Row("hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
        dense=0.67, tensor=0.25, fp32=0.66, comm=0.00, fusible=0.15, compiled=False,
        never=("precision.amp", "fusion.elementwise")),
    Row("hta/critical_path/end_to_end/simple_add/input/trace.json.gz",
        dense=0.67, tensor=0.25, fp32=0.66, comm=0.00, fusible=0.15, compiled=False),
    Row("hta/critical_path/end_to_end/simple_add/output/overlaid_critical_path_trace.json.gz",
        dense=0.67, tensor=0.25, fp32=0.66, comm=0.00, fusible=0.15, compiled=False),
    Row("hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
        dense=0.00, tensor=0.00, fp32=0.00, comm=0.00, fusible=0.27, compiled=False,
        first=("sync.host_device",)),
    Row("hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
        dense=1.00, tensor=0.00, fp32=1.00, comm=0.00, fusible=0.00, compiled=False),
    Row("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        dense=0.27, tensor=1.00, fp32=0.00, comm=0.00, fusible=0.65, compiled=False,
        never=("fusion.elementwise",)),  # 98% idle: fusing would gain < 1%
    Row("hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
        dense=0.00, tensor=0.00, fp32=0.00, comm=0.00, fusible=0.00, compiled=False),
    Row("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        dense=0.00, tensor=0.00, fp32=0.00, comm=0.00, fusible=0.00, compiled=False),
    # MI300X, Hugging Face models in bf16 on matrix cores (Tensile Cijk_ GEMMs)
    Row("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # eager decode
        dense=0.39, tensor=1.00, fp32=0.00, comm=0.00, fusible=0.48, compiled=False,
        first=("fusion.elementwise",), never=GPU_ADVICE_ON_BF16),
    Row("tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz",
        dense=0.43, tensor=1.00, fp32=0.00, comm=0.00, fusible=0.10, compiled=False,
        first=("dataloader.num_workers", "attention.fused"), never=GPU_ADVICE_ON_BF16),
    Row("tracelens/mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
        dense=0.46, tensor=1.00, fp32=0.00, comm=0.00, fusible=0.19, compiled=False,
        first=("attention.fused",), never=GPU_ADVICE_ON_BF16),
    Row("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
        dense=0.45, tensor=1.00, fp32=0.00, comm=0.00, fusible=0.24, compiled=False,
        first=("launch.overhead",), never=GPU_ADVICE_ON_BF16),
    Row("tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
        dense=0.57, tensor=0.97, fp32=0.00, comm=0.00, fusible=0.21, compiled=False,
        first=("launch.overhead",), never=GPU_ADVICE_ON_BF16),
    Row("tracelens/mi300/resnet_act_checkpoint.json.gz",  # 8-GPU RCCL, communication-bound
        dense=0.06, tensor=0.26, fp32=0.00, comm=0.84, fusible=0.12, compiled=False,
        first=("distributed.comm_bound",), never=GPU_ADVICE_ON_BF16),
    # MI210 GPU-only ResNet training: eager batch norm + elementwise
    Row("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz",
        dense=0.32, tensor=0.05, fp32=0.00, comm=0.00, fusible=0.41, compiled=False,
        first=("fusion.elementwise",), never=GPU_ADVICE_ON_BF16),
    # B200, one rank of an 8-GPU vLLM run: compiled, multimem all-reduce is communication
    Row("tracelens/b200/eager_trace.json.gz",
        dense=0.60, tensor=1.00, fp32=0.00, comm=0.18, fusible=0.09, compiled=True,
        first=("launch.overhead",), never=GPU_ADVICE_ON_BF16 + ("fusion.elementwise",)),
]
# The span TraceLens' golden gpu_timeline.csv uses, in our terms (None: neither of ours).
SPAN = {
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": "step",
    "tracelens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz": "step",
    "tracelens/mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz": "step",
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz": "step",
    "tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz": "step",
    "tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz": "kernel",  # no CPU side at all
    # 3 steps whose GPU-side annotations last 16 µs each: TraceLens times a window we lack
    "tracelens/mi300/resnet_act_checkpoint.json.gz": None,
}
# fmt: on

pytestmark = pytest.mark.skipif(PEER is None, reason="shared/peer-traces not available")


@functools.cache
def _analysed(trace: str) -> tuple[TraceSummary, list[Finding]]:
    assert PEER is not None
    summary = summarize(load_trace(PEER / trace))
    return summary, diagnose(RunEvidence(traces=[summary]))


def _shares(summary: TraceSummary) -> dict[str, float]:
    tc = summary.tensor_cores
    comm = sum(v["us"] for k, v in summary.kernel_breakdown.items() if "COMMUNICATION" in k)
    covered = sum(v["us"] for v in summary.kernel_breakdown.values())
    return {
        "dense": tc["dense_math_share"],
        "tensor": tc["tensor_core_share"],
        "fp32": tc["fp32_simt_share"],
        "comm": comm / covered if covered else 0.0,
        "fusible": tc["elementwise_share"] + tc["normalisation_share"] + tc["concat_share"],
    }


def test_the_table_covers_every_peer_trace() -> None:
    assert PEER is not None
    on_disk = {
        str(p.relative_to(PEER))
        for folder in ("hta", "tracelens")
        for p in (PEER / folder).rglob("*.json.gz")
    }
    assert on_disk == {row.trace for row in TABLE}


@pytest.mark.parametrize("row", TABLE, ids=[r.trace for r in TABLE])
def test_it_reads_each_real_trace_as_the_table_says(row: Row) -> None:
    summary, findings = _analysed(row.trace)
    expected = {k: getattr(row, k) for k in ("dense", "tensor", "fp32", "comm", "fusible")}
    assert _shares(summary) == pytest.approx(expected, abs=SHARE_TOLERANCE)
    assert summary.compiled is row.compiled
    ids = [f.id for f in findings]
    assert ids[: len(row.first)] == list(row.first)
    assert not set(ids) & set(row.never)


@pytest.mark.parametrize("row", [r for r in TABLE if r.compiled], ids=lambda r: r.trace)
def test_it_never_tells_a_compiled_model_to_compile(row: Row) -> None:
    _, findings = _analysed(row.trace)
    for found in findings:
        assert not (found.fix.knob or "").startswith("compile=")
        assert "already runs compiled" in found.fix.text or "compile" not in found.fix.snippet


@pytest.mark.parametrize("trace", sorted(SPAN), ids=str)
def test_it_agrees_with_tracelens_golden_gpu_timeline(trace: str) -> None:
    assert PEER is not None
    path = PEER / trace
    golden_csv = path.parent / (path.name.removesuffix(".json.gz") + "_perf_report_csvs")
    if not golden_csv.is_dir():
        golden_csv = path.parent / f"{path.parent.name}_perf_report_csvs"
    if not golden_csv.is_dir():  # resnet_act_checkpoint's report is named for the recompute run
        golden_csv = next(path.parent.glob(path.name.split(".")[0] + "*_perf_report_csvs"))
    with (golden_csv / "gpu_timeline.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("is_recompute", "False") == "False"]
    golden = {r["type"]: (float(r["time ms"]) * 1e3, float(r["percent"])) for r in rows}
    summary, _ = _analysed(trace)
    t = summary.temporal
    spans = {
        "kernel": (t.kernel_span_us, t.pct(t.idle_us)),
        "step": (
            (summary.step_timeline["span_us"], summary.step_timeline["idle_pct"])
            if summary.step_timeline
            else (0.0, 0.0)
        ),
    }
    total_us = golden["total_time"][0]
    same = [name for name, (span, _) in spans.items() if span == pytest.approx(total_us, rel=1e-3)]
    expected = SPAN[trace]
    if expected is None:
        assert same == []
        return
    assert expected in same
    _, idle_pct = spans[expected]
    assert idle_pct == pytest.approx(golden["idle_time"][1], abs=TRACELENS_TOLERANCE_PP)
    if expected == "step":
        timeline = summary.step_timeline
        assert timeline is not None
        for key in ("computation", "exposed_comm", "exposed_memcpy", "busy"):
            assert timeline[f"{key}_pct"] == pytest.approx(
                golden[f"{key}_time"][1], abs=TRACELENS_TOLERANCE_PP
            )


@pytest.mark.parametrize("row", TABLE, ids=[r.trace for r in TABLE])
def test_the_gains_claimed_on_a_real_trace_fit_the_time_it_shows(row: Row) -> None:
    summary, findings = _analysed(row.trace)
    available = available_time(RunEvidence(traces=[summary]))
    for kind, cap in available.items():
        claimed = sum(f.estimated_gain for f in findings if CLAIMS.get(f.id) == kind)
        assert claimed <= cap + 1e-9, (kind, [(f.id, f.estimated_gain) for f in findings])
    assert sum(f.estimated_gain for f in findings) <= 1.0 + 1e-9
