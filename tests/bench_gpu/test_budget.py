"""The kit's time budget: stages that do not fit are skipped, commands are cut to what is left."""

from __future__ import annotations

from bench.gpu import stages
from bench.gpu.expectations import BY_WORKLOAD


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_it_keeps_a_reserve_for_the_report_and_cuts_timeouts_to_what_is_left() -> None:
    clock = Clock()
    budget = stages.Budget(100.0, clock=clock)
    assert budget.left() == 100.0 - stages.RESERVE_S
    assert budget.allows(80.0) and not budget.allows(90.0)
    clock.now += 60.0
    assert budget.timeout(600.0) == 100.0 - 60.0 - stages.RESERVE_S
    assert budget.timeout(5.0) == 5.0
    clock.now += 100.0
    assert budget.timeout(600.0) == 1.0


def test_it_skips_a_workload_that_no_longer_fits_and_says_why(tmp_path) -> None:
    clock = Clock()
    budget = stages.Budget(30.0, clock=clock)
    cfg = stages.Config(device="cpu", work=tmp_path)
    result = stages.diagnose(cfg, budget, BY_WORKLOAD["healthy_bf16"])
    assert result["status"] == "skipped"
    assert result["error"].startswith("time budget: 15 s left, needs ~25 s")
    assert not (tmp_path / "healthy_bf16").exists()
