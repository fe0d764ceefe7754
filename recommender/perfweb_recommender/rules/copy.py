"""The `copy.*` rules."""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule
from perfweb_recommender.rules.signals import trace_share

H2D_SHARE_MIN = 0.02  # fraction of step time in H2D copies on the compute stream
H2D_OVERLAP_MAX = 0.2  # fraction of those copies overlapped by compute: below = serialised


@rule("copy.synchronous_h2d", risk="data-path")
def copy_synchronous_h2d(evidence: RunEvidence) -> Finding | None:
    """What: host-to-device copies run on the compute stream, serialised with the kernels.

    Why: a copy on the same stream as the model's kernels cannot overlap them, so the GPU
    computes nothing while each batch crosses PCIe.

    Fix: copy with `non_blocking=True` from pinned memory on a side stream and prefetch the
    next batch while the current one computes.
    """
    for trace in evidence.traces:
        copy_us = trace.h2d.get("h2d_on_compute_stream_us", 0.0)
        if copy_us <= 0:
            continue
        overlapped = trace.h2d.get("h2d_overlapped_us", 0.0) / copy_us
        share = trace_share(trace, copy_us - trace.h2d.get("h2d_overlapped_us", 0.0))
        if share < H2D_SHARE_MIN or overlapped > H2D_OVERLAP_MAX:
            continue
        return finding(
            "copy.synchronous_h2d",
            title=f"Host-to-device copies stall the compute stream for {share:.1%} of each step",
            confidence=0.7,
            gain=share,
            basis="Amdahl on the non-overlapped H2D copy time on compute streams",
            evidence=[
                Evidence(
                    "H2D copy time on compute streams", copy_us, "µs", f"trace rank {trace.rank}"
                ),
                Evidence("of which overlapped by compute", overlapped, "fraction", "trace"),
                Evidence("share of step time", share, "fraction", "trace"),
            ],
            fix=Fix(
                text="Prefetch the next batch to the GPU on a side stream while this one computes.",
                snippet="stream = torch.cuda.Stream()\nwith torch.cuda.stream(stream):\n"
                "    next_x = next_x.to(device, non_blocking=True)\n"
                "torch.cuda.current_stream().wait_stream(stream)",
            ),
        )
    return None
