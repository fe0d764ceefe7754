"""The primary-module watch: found on the first call, no global hooks, nothing on the model."""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from perfweb_agent.core.buffer import StepBuffer
from perfweb_agent.runtime.modules import ModuleWatch
from perfweb_agent.runtime.steps import StepTimer


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


@pytest.fixture
def watch() -> Iterator[ModuleWatch]:
    watch = ModuleWatch(torch, StepTimer(StepBuffer()))
    watch.install()
    yield watch
    watch.remove()


def test_the_first_outermost_module_called_is_primary_and_the_search_hook_goes_away(
    watch: ModuleWatch,
) -> None:
    net = Net().eval()
    with torch.no_grad():
        for _ in range(5):
            net(torch.randn(3, 4))
    assert watch.primary is net
    original = nn.Module._wrapped_call_impl
    assert nn.Module.__call__ is original  # every other module runs torch's own call
    assert nn.Sequential.__call__ is original
    assert not nn.modules.module._global_forward_hooks
    timer = watch._timer
    timer.finish()
    assert (timer.source, timer.index) == ("module", 5)


def test_a_watched_model_still_saves_copies_and_loads_whole(watch: ModuleWatch) -> None:
    net = Net()
    net(torch.randn(2, 4))
    saved = io.BytesIO()
    torch.save(net, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=False)
    twin = copy.deepcopy(net)
    x = torch.randn(2, 4)
    assert torch.equal(loaded(x), net(x)) and torch.equal(twin(x), net(x))
    assert watch.primary is net
    assert not net._forward_pre_hooks and not net._forward_hooks


def test_when_the_primary_is_collected_the_next_outermost_module_takes_over(
    watch: ModuleWatch,
) -> None:
    Net()(torch.randn(1, 4))  # primary, then garbage at once
    second = nn.Linear(4, 2)
    second(torch.randn(1, 4))
    assert watch.primary is second


class Facts:
    """The FactBuffer's `set`/`update`, recorded."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def set(self, key: str, value: object) -> None:
        self.values[key] = value

    def update(self, values: dict[str, object]) -> None:
        self.values.update(values)


def _shapes_fact(shapes: list[tuple[int, ...]]) -> object:
    facts = Facts()
    watch = ModuleWatch(torch, StepTimer(StepBuffer()), facts=facts)
    watch.install()
    try:
        net = Net().eval()
        with torch.inference_mode():
            for shape in shapes:
                net(torch.randn(*shape))
    finally:
        watch.remove()
    return facts.values.get("inference.input_shapes")


def test_it_tells_fixed_input_shapes_from_varying_ones() -> None:
    from perfweb_agent.runtime.modules import SHAPE_CALLS

    assert _shapes_fact([(8, 4)] * SHAPE_CALLS) == "fixed"
    assert _shapes_fact([(8, 4)] * (SHAPE_CALLS - 1)) is None  # too few calls to say
    assert _shapes_fact([(8, 4), (8, 4), (3, 4)] + [(8, 4)] * SHAPE_CALLS) == "varying"
