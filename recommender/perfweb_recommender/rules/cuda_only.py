"""Lessons that only apply with a GPU, on a run that has none: informational, gain 0.

A CUDA-only setting on a CPU run costs nothing to keep and gains nothing to change; the
finding says so, so that the user does not chase it, and never ranks above a real gain.
"""

from __future__ import annotations

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding


def cpu_only_run(evidence: RunEvidence) -> bool:
    """Whether the run had no GPU: none reported, none used, and the agent found no NVML or
    the installed torch is a CPU build."""
    if evidence.uses_cuda() or any(d.get("kind") == "gpu" for d in evidence.devices):
        return False
    cpu_build = str(evidence.fact("torch.version", "")).endswith("+cpu")
    return cpu_build or evidence.fact("nvml.available") is False


def pin_memory_without_gpu(evidence: RunEvidence) -> Finding | None:
    """`dataloader.pin_memory` on a CPU run: a loader asks for pinned memory, no GPU uses it."""
    pinned = [d for d in evidence.dataloaders() if d.get("pin_memory") is True]
    if not pinned or not cpu_only_run(evidence):
        return None
    return finding(
        "dataloader.pin_memory",
        title=f"pin_memory=True on a run without a GPU ({len(pinned)} DataLoader"
        f"{'s' if len(pinned) > 1 else ''}): informational, nothing to gain",
        confidence=0.9,
        gain=0.0,
        basis="informational: pinned memory only speeds up copies to a GPU; none on this run",
        evidence=[
            Evidence("DataLoaders with pin_memory=True", len(pinned), "", "facts"),
            Evidence("GPU", "none", "", "facts"),
        ],
        fix=Fix(
            text="Nothing to do on this host: pinning only matters once the batches go to a "
            "GPU. Keep pin_memory=True for GPU runs, or set it from the device.",
            snippet="DataLoader(dataset, ..., pin_memory=torch.cuda.is_available())",
        ),
    )
