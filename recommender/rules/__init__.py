"""The rule registry: one pure, documented rule per FIXES.md id, and `diagnose`."""

from __future__ import annotations

import logging

from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules import (  # noqa: F401 (importing registers the rules)
    attention,
    batch,
    copy,
    cpu,
    cudnn,
    dataloader,
    distributed,
    fusion,
    gpu,
    inference,
    launch,
    memory,
    model,
    precision,
    sync,
)
from perfweb_recommender.rules.base import REGISTRY, Finding, rank_findings
from perfweb_recommender.rules.sharing import share_overlapping_gains

log = logging.getLogger(__name__)

# FIXES.md ids no rule covers yet, and why (the signals we have cannot support them).
UNSUPPORTED: dict[str, str] = {}


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
    share_overlapping_gains(findings, evidence)
    return rank_findings(findings)
