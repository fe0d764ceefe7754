"""Rules on how the step anatomy (recommender/perfweb_recommender/anatomy.py) changes through a
run."""

from __future__ import annotations

from perfweb_recommender.anatomy import step_anatomy
from perfweb_recommender.evidence import RunEvidence
from perfweb_recommender.rules.base import Evidence, Finding, Fix, finding, rule

DRIFT_GROWTH_MIN = 0.5  # a phase's median, last third over first third of the steady steps, - 1
DRIFT_SHARE_MIN = 0.05  # its growth as a share of the median step: tiny phases do not count
DRIFT_STEPS_MIN = 30  # steady steps with phases (ten per third)


@rule("run.phase_drift", risk="system")
def run_phase_drift(evidence: RunEvidence) -> Finding | None:
    """What: one phase of the step grows through the run: its median over the last third of
    the steady steps is more than 50% above its median over the first third.

    Why: a step that gets slower as the run goes on usually carries growing state: a Python
    list of tensors that keeps the graph alive, a retained autograd graph, a cache that keeps
    missing, allocator fragmentation. The phase that grows says where to look.

    Fix: look for growing Python state (lists of tensors, `loss` kept instead of
    `loss.item()`), retained graphs, allocator fragmentation, a cache that invalidates.
    """
    anatomy = step_anatomy(evidence)
    if anatomy is None:
        return None
    main = anatomy.main
    if main.steps < DRIFT_STEPS_MIN:
        return None
    growth = {
        name: main.last_third.get(name, 0.0) - first for name, first in main.first_third.items()
    }
    phase = max(growth, key=lambda name: growth[name])
    first, last = main.first_third[phase], main.last_third.get(phase, 0.0)
    grown = growth[phase]
    if grown <= 0 or grown < DRIFT_SHARE_MIN * main.median_step_s:
        return None
    if first > 0 and last / first - 1 < DRIFT_GROWTH_MIN:
        return None
    where = "what no hook claims (the script's own Python)" if phase == "other" else phase
    ratio = f"{last / first:.1f}x" if first > 0 else "from nothing"
    return finding(
        "run.phase_drift",
        title=f"The {phase.replace('_', ' ')} phase grows {ratio} through the run "
        f"(+{grown * 1e3:.1f} ms per step)",
        confidence=0.6,
        gain=grown / (main.median_step_s + grown / 2) if main.median_step_s else 0.0,
        basis="measured: the phase's growth between the first and the last third of the "
        "steady steps, as a share of the step",
        evidence=[
            Evidence(f"{phase} phase, first third (median)", first, "s", "metrics (step anatomy)"),
            Evidence(f"{phase} phase, last third (median)", last, "s", "metrics (step anatomy)"),
            Evidence("steady steps", main.steps, "steps", "metrics"),
        ],
        fix=Fix(
            text=f"The growth is in {where}: look there for state that grows every step "
            "(tensors appended to a list, a graph kept alive, a cache that keeps missing).",
            snippet="losses.append(loss.item())  # not losses.append(loss): keeps every graph",
        ),
    )
