"""The rule registry: one pure, documented rule per FIXES.md id, and `diagnose`."""

from __future__ import annotations

import logging

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules import (  # noqa: F401 (importing registers the rules)
    accumulation,
    attention,
    batch,
    compute,
    copy,
    cpu,
    cudnn,
    dataloader,
    distributed,
    distributed_comm,
    fusion,
    generation,
    gpu,
    inference,
    inference_model,
    launch,
    loader_wait,
    memory,
    model,
    optimizer,
    precision,
    run_phases,
    sync,
)
from perfweb_recommender.rules.base import REGISTRY, Finding, is_host_condition, rank_findings
from perfweb_recommender.rules.sharing import share_overlapping_gains

log = logging.getLogger(__name__)

# FIXES.md ids no rule in REGISTRY covers, and why (the signals are not there yet, or the
# finding needs more than one run's evidence).
UNSUPPORTED: dict[str, str] = {
    "run.regression": "a cross-run finding: it needs the job's baseline run, which one run's "
    "evidence does not hold; built in rules/cross_run.py (regression_finding), which the "
    "server's diagnosis calls with the baseline (perfweb/diagnostics/comparison.py)",
}
# A finding that names the cause of a wait more precisely replaces the generic one.
SUPERSEDES: dict[str, tuple[str, ...]] = {
    "dataloader.io_wait": ("dataloader.num_workers",),
    "dataloader.cpu_bound": ("dataloader.num_workers",),
}


def diagnose(evidence: RunEvidence) -> list[Finding]:
    """Run every registered rule on the evidence; findings ranked best first.

    A rule that raises is logged and skipped: one faulty rule never hides the others. A
    finding whose fix an optimisation job measured ranks by that measured gain.
    """
    findings: list[Finding] = []
    for registered in REGISTRY.values():
        try:
            result = registered.func(evidence)
        except Exception:  # noqa: BLE001 - isolate rule bugs from the diagnosis
            log.exception("rule %s failed", registered.id)
            continue
        if result is not None:
            if registered.id in evidence.verified_gains:
                result.measured_gain = evidence.verified_gains[registered.id]
            findings.append(result)
    findings = without_superseded(findings)
    # Host conditions explain inflated figures; they claim none of the workload's time.
    share_overlapping_gains([f for f in findings if not is_host_condition(f)], evidence)
    return rank_findings(findings)


def without_superseded(findings: list[Finding]) -> list[Finding]:
    """`findings` less those a more precise finding of the same run replaces (SUPERSEDES)."""
    replaced = {old for f in findings for old in SUPERSEDES.get(f.id, ())}
    return [f for f in findings if f.id not in replaced]
