"""The step anatomy read by the recommender (recommender/perfweb_recommender/anatomy.py) and its
rules: optimizer.foreach, run.phase_drift, distributed.straggler per phase; warm-up left out."""

from __future__ import annotations

from perfweb_recommender.anatomy import step_anatomy
from perfweb_recommender.evidence import RunEvidence, Series, StepSample
from perfweb_recommender.rules import REGISTRY


def run_of(
    per_step: list[dict[str, float]], *, rank: int = 0, facts: dict[str, object] | None = None
) -> RunEvidence:
    """Evidence of one rank whose steps are these phases (seconds), one per second."""
    evidence = RunEvidence(facts=dict(facts or {}))
    add_rank(evidence, per_step, rank=rank)
    return evidence


def add_rank(evidence: RunEvidence, per_step: list[dict[str, float]], *, rank: int) -> None:
    columns: dict[str, tuple[list[float], list[float]]] = {}
    for index, phases in enumerate(per_step):
        t = 1_764_000_000.0 + index
        evidence.steps.append(StepSample(rank, index, t, sum(phases.values()), phases.get("data")))
        for name, seconds in phases.items():
            times, values = columns.setdefault(name, ([], []))
            times.append(t)
            values.append(seconds)
    for name, (times, values) in columns.items():
        evidence.series.append(Series(f"rank:{rank}", f"step.phase.{name}", times, values))


STEP = {"data": 0.001, "forward": 0.003, "backward": 0.004, "optimizer": 0.001, "other": 0.001}
HEAVY_OPTIMIZER = {**STEP, "optimizer": 0.006}
LOOPED = {
    "optimizer.class": "SGD",
    "optimizer.foreach": False,
    "optimizer.fused": "default",
    "optimizer.param_tensors": 300,
    "optimizer.median_param_numel": 64,
}


def test_it_keeps_the_slow_first_steps_out_of_the_medians_and_names_them() -> None:
    warm = [{**STEP, "forward": 0.5}, {**STEP, "forward": 0.2}]
    anatomy = step_anatomy(run_of(warm + [STEP] * 40))
    assert anatomy is not None
    assert anatomy.phases["forward"] == STEP["forward"]
    (warmup,) = anatomy.warmup
    assert (warmup.rank, warmup.steps) == (0, 3)  # the two slow ones, and never fewer than 3
    assert "steps 0-2 of rank 0 (warm-up" in warmup.text()
    assert abs(sum(anatomy.shares.values()) - 1.0) < 1e-9
    assert anatomy.largest() == "backward"


def test_it_names_foreach_for_an_optimizer_phase_that_dominates_a_looped_optimizer() -> None:
    found = REGISTRY["optimizer.foreach"].func(run_of([HEAVY_OPTIMIZER] * 40, facts=LOOPED))
    assert found is not None
    assert "foreach=True" in found.fix.snippet
    assert abs(found.estimated_gain - 0.2) < 1e-9  # half of the optimizer's 6 of 15 ms


def test_it_leaves_a_multi_tensor_optimizer_or_a_small_optimizer_phase_alone() -> None:
    rule = REGISTRY["optimizer.foreach"].func
    assert rule(run_of([HEAVY_OPTIMIZER] * 40, facts={**LOOPED, "optimizer.foreach": True})) is None
    assert rule(run_of([STEP] * 40, facts=LOOPED)) is None  # 10% of the step
    assert rule(run_of([HEAVY_OPTIMIZER] * 40)) is None  # no optimizer facts: not judged


def test_it_finds_the_phase_that_grows_through_the_run() -> None:
    growing = [{**STEP, "other": 0.001 + 0.0001 * i} for i in range(60)]
    found = REGISTRY["run.phase_drift"].func(run_of(growing))
    assert found is not None
    assert found.title.startswith("The other phase grows")
    assert REGISTRY["run.phase_drift"].func(run_of([STEP] * 60)) is None


def test_it_names_the_phase_in_which_the_straggler_loses_its_time() -> None:
    evidence = RunEvidence()
    for rank in (0, 1, 2):
        add_rank(evidence, [STEP] * 30, rank=rank)
    add_rank(evidence, [{**STEP, "data": 0.008}] * 30, rank=3)
    found = REGISTRY["distributed.straggler"].func(evidence)
    assert found is not None
    assert "Rank 3" in found.title and "7.0 ms more data per step" in found.title
