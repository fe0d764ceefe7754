"""Gradient accumulation facts: backwards per optimizer step, gradients zeroed between the
backwards of one step, DDP backwards that all-reduce; and the decoding context growth."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.runtime.accumulation import CHECK_STEPS, AccumulationWatch
from perfweb_agent.runtime.context_growth import REPORT_EVERY, ContextGrowth

torch = pytest.importorskip("torch")


def _model_and_optimizer() -> tuple[object, object]:
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _watch() -> tuple[AccumulationWatch, FactBuffer]:
    facts = FactBuffer()
    return AccumulationWatch(facts), facts


def _step(watch: AccumulationWatch, optimizer: object, calls: list[str], owner: object) -> None:
    for call in calls:
        if call == "backward":
            watch.backward_done()
        else:
            watch.zero_grad(owner)
    watch._after_step(optimizer, (), {})


def test_it_counts_the_steps_whose_gradients_a_zero_grad_threw_away() -> None:
    watch, facts = _watch()
    _, optimizer = _model_and_optimizer()
    for _ in range(CHECK_STEPS):  # zero_grad inside the micro-step loop
        _step(watch, optimizer, ["zero_grad", "backward"] * 4, optimizer)
    assert facts.snapshot() == {
        "training.backward_per_step": 4.0,
        "training.zero_grad_discards_per_step": 1.0,
        "training.accumulation_checked_steps": CHECK_STEPS,
    }
    assert not watch.active  # inert after the check


def test_a_zero_grad_once_per_step_discards_nothing() -> None:
    watch, facts = _watch()
    model, optimizer = _model_and_optimizer()
    for _ in range(CHECK_STEPS):  # accumulation done right, zeroed through the module
        _step(watch, optimizer, ["zero_grad", "backward", "backward", "backward"], model)
    assert facts.snapshot()["training.zero_grad_discards_per_step"] == 0.0
    assert facts.snapshot()["training.backward_per_step"] == 3.0


def test_a_module_zeroing_the_stepping_optimizers_parameters_discards_them() -> None:
    watch, facts = _watch()
    model, optimizer = _model_and_optimizer()
    for _ in range(CHECK_STEPS):
        _step(watch, optimizer, ["backward", "zero_grad", "backward"], model)
    assert facts.snapshot()["training.zero_grad_discards_per_step"] == 1.0


def test_a_gan_zeroing_its_other_model_between_backwards_discards_nothing() -> None:
    """D's loss backward, then G zeroed (dropping what D's loss left in G) and G's backward,
    then both steps: D's gradients were never zeroed between its backwards."""
    watch, facts = _watch()
    net_g, opt_g = _model_and_optimizer()
    net_d, opt_d = _model_and_optimizer()
    for _ in range(CHECK_STEPS // 2):
        watch.zero_grad(net_d)
        watch.backward_done()
        watch.zero_grad(net_g)
        watch.backward_done()
        watch._after_step(opt_d, (), {})
        watch._after_step(opt_g, (), {})
    assert facts.snapshot()["training.zero_grad_discards_per_step"] == 0.0


def test_it_counts_the_ddp_forwards_that_will_all_reduce() -> None:
    watch, facts = _watch()
    _, optimizer = _model_and_optimizer()
    syncing, silent = (
        SimpleNamespace(require_backward_grad_sync=True),
        SimpleNamespace(require_backward_grad_sync=False),
    )
    for _ in range(CHECK_STEPS):
        for module in (silent, silent, silent, syncing):  # no_sync() for 3 of 4 micro-steps
            watch.ddp_forward(module)
            watch.backward_done()
        watch._after_step(optimizer, (), {})
    assert facts.snapshot()["ddp.synced_backward_per_step"] == 1.0


def test_it_fits_the_cost_of_a_call_against_its_growing_context() -> None:
    facts = FactBuffer()
    growth = ContextGrowth(facts)
    for _ in range(2):  # two prompts of 8 positions, each decoded to 8 + REPORT_EVERY / 2
        for length in range(8, 8 + REPORT_EVERY // 2 + 1):
            growth.observe(length, 0.002 + 0.0001 * length)
    seen = facts.snapshot()
    assert seen["inference.growing_context_calls"] == REPORT_EVERY
    assert seen["inference.per_position_cost_s"] == pytest.approx(0.0001)
    assert seen["inference.call_cost_at_zero_s"] == pytest.approx(0.002)
    assert seen["inference.context_length_max"] == 8 + REPORT_EVERY // 2


def test_calls_with_a_cache_one_token_long_report_no_growth() -> None:
    facts = FactBuffer()
    growth = ContextGrowth(facts)
    for _ in range(4 * REPORT_EVERY):
        growth.observe(1, 0.002)
    assert facts.snapshot() == {}


def test_a_slow_call_does_not_move_the_fit() -> None:
    """A profiler window or a busy host makes some calls slower, never faster."""
    facts = FactBuffer()
    growth = ContextGrowth(facts)
    for prompt in range(2):
        for length in range(8, 8 + REPORT_EVERY // 2 + 1):
            slow = 0.01 if prompt == 0 and length == 10 else 0.0
            growth.observe(length, 0.002 + 0.0001 * length + slow)
    assert facts.snapshot()["inference.per_position_cost_s"] == pytest.approx(0.0001)
