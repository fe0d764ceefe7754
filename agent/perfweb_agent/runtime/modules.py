"""The primary outermost `nn.Module`: one call of it is one request or batch of inference.

The first module called while no other module runs (outside DataLoader fetches, whose
transforms may be modules) becomes the primary module. Finding it costs one wrapper on
`nn.Module.__call__` for that first call only; afterwards only the primary's own class is
wrapped (so every other module runs torch's call unchanged, with no global hook that would
send every submodule down torch's slow path), and the wrapper returns at once for any other
instance of that class. No hook is stored on the module itself, so `torch.save(model)` and
`copy.deepcopy` see nothing of the agent. When the primary module is garbage collected,
the search starts again for the next one.

Each call of the primary records its batch size (the first dimension of its first tensor
input); a call in `eval()` or without grad also ends a `module` step (see
agent/perfweb_agent/runtime/steps.py).

A Hugging Face `generate()` call calls the model once per decoding step: it, not each of
those calls, is the request. Once `transformers.generation.utils` is imported (by the
script, never by the agent), `GenerationMixin.generate` is wrapped: a call of it is one
`module` step with the batch size of its inputs, and the model calls inside it are not.
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.importhook import when_imported
from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime.anatomy import FORWARD
from perfweb_agent.runtime.context_growth import ContextGrowth, context_length
from perfweb_agent.runtime.model_facts import model_facts
from perfweb_agent.runtime.steps import StepTimer

MARK = "__perf_agent_wrapped__"
GENERATION = "transformers.generation.utils"  # defines GenerationMixin.generate
SHAPE_CALLS = 32  # calls of the primary whose input shapes decide `inference.input_shapes`


def leading_dimension(value: Any, tensor: Any) -> int | None:
    """The first dimension of `value` if a tensor, else of the first tensor one level in."""
    if isinstance(value, tensor):
        return value.size(0) if value.ndim else None  # type: ignore[no-any-return]
    if isinstance(value, (list, tuple)):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return None
    for item in items:
        if isinstance(item, tensor):
            return item.size(0) if item.ndim else None  # type: ignore[no-any-return]
    return None


def _call_batch(args: tuple[Any, ...], kwargs: dict[str, Any], tensor: Any) -> int | None:
    for value in args:
        size = leading_dimension(value, tensor)
        if size is not None:
            return size
    for value in kwargs.values():
        if isinstance(value, tensor):
            return value.size(0) if value.ndim else None  # type: ignore[no-any-return]
    return None


class ModuleWatch:
    """Finds the primary module, then times its calls; never raises into the script."""

    def __init__(
        self,
        torch: Any,
        timer: StepTimer,
        *,
        clock: Callable[[], float] = time.perf_counter,
        facts: Any = None,
    ) -> None:
        self._torch = torch
        self._base = torch.nn.Module
        self._timer = timer
        self._clock = clock
        self._original = self._base.__call__
        self._primary: weakref.ref[Any] | None = None
        self._wrapped: dict[type, Any] = {}  # class -> its own __call__ before, or None
        self._depth = 0
        self._removed = False
        self._facts = facts  # a FactBuffer: model.* and inference.grad_enabled (model_facts)
        self._grad_fact: bool | None = None  # last inference.grad_enabled set; True is final
        self._shape: Any = None  # the first call's first tensor input shape
        self._shape_calls = SHAPE_CALLS  # calls left to compare; 0 once the fact is set
        self._generating = False  # inside a wrapped HF generate(): model calls are not requests
        self._generate: tuple[Any, Any] | None = None  # (GenerationMixin, its own generate)
        self._cancel_generate_hook: Callable[[], None] | None = None
        self._growth = ContextGrowth(facts) if facts is not None else None

    def install(self) -> None:
        """Start looking for the primary module."""
        if self._removed or getattr(self._base.__call__, MARK, False):
            return
        original, adopt = self._original, self._adopt
        timer = self._timer

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if timer.fetching:
                return original(module, *args, **kwargs)
            try:
                call = adopt(module)
            except Exception as exc:  # noqa: BLE001
                say_once("module-adopt", "cannot time module calls: %s", exc)
                self._base.__call__ = original
                return original(module, *args, **kwargs)
            return call(module, *args, **kwargs)

        setattr(__call__, MARK, True)
        self._base.__call__ = __call__
        if self._cancel_generate_hook is None:
            self._cancel_generate_hook = when_imported(GENERATION, self._wrap_generate)

    @property
    def primary(self) -> Any | None:
        """The primary module, while it lives."""
        return self._primary() if self._primary is not None else None

    def _adopt(self, module: Any) -> Callable[..., Any]:
        """`module` is the primary from now on: stop searching, wrap its class."""
        self._base.__call__ = self._original
        self._primary = weakref.ref(module, self._lost)
        if self._facts is not None:
            self._facts.update(model_facts(self._torch, module))
        cls = type(module)
        if cls not in self._wrapped:
            self._wrap_class(cls)
        return cls.__call__  # type: ignore[no-any-return]

    def remove(self) -> None:
        """Put every `__call__` back as it was (the watch is off for good)."""
        self._removed = True
        self._primary = None
        if self._cancel_generate_hook is not None:
            self._cancel_generate_hook()
        if self._generate is not None:
            mixin, own = self._generate
            mixin.generate = own
            self._generate = None
        if getattr(self._base.__call__, MARK, False):
            self._base.__call__ = self._original
        for cls, own in self._wrapped.items():
            if own is None:
                with contextlib.suppress(AttributeError):
                    delattr(cls, "__call__")
            else:
                cls.__call__ = own  # type: ignore[method-assign]
        self._wrapped = {}

    def _lost(self, _ref: Any) -> None:
        """The primary module was collected: look for the next one."""
        self._primary = None
        with contextlib.suppress(Exception):  # a GC callback must never raise
            self.install()

    def _eval_call_recorded(self, recording: bool) -> None:
        """`inference.grad_enabled`: did an eval-mode call of the primary record autograd."""
        if self._facts is not None and recording != self._grad_fact:
            self._facts.set("inference.grad_enabled", recording)
        self._grad_fact = True if recording else bool(self._grad_fact)

    def _input_shape_seen(self, args: tuple[Any, ...]) -> None:
        """`inference.input_shapes`: "varying" at the first call whose first tensor input
        changes shape, "fixed" after SHAPE_CALLS calls of one shape (cudnn.benchmark)."""
        tensor = self._torch.Tensor
        shape = next((tuple(a.shape) for a in args if isinstance(a, tensor)), None)
        if shape is None:
            return
        if self._shape is None:
            self._shape = shape
        self._shape_calls -= 1
        if shape != self._shape or not self._shape_calls:
            self._shape_calls = 0
            if self._facts is not None:
                self._facts.set(
                    "inference.input_shapes", "fixed" if shape == self._shape else "varying"
                )

    def _wrap_generate(self, module: Any) -> None:
        """Make each `GenerationMixin.generate` call one request (see the module docstring)."""
        mixin: Any = getattr(module, "GenerationMixin", None)
        original = getattr(mixin, "generate", None)
        if self._removed or original is None or getattr(original, MARK, False):
            return
        watch, timer, clock, tensor = self, self._timer, self._clock, self._torch.Tensor
        anatomy = timer.anatomy

        def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
            if watch._generating:  # a generate inside a generate (assisted decoding)
                return original(model, *args, **kwargs)
            started = clock()
            watch._generating = True
            with contextlib.suppress(Exception):
                anatomy.enter(FORWARD, started)
            try:
                result = original(model, *args, **kwargs)
            finally:
                watch._generating = False
                with contextlib.suppress(Exception):
                    anatomy.leave(FORWARD)
            try:
                if watch._primary is not None:  # the model (or its encoder) was called
                    timer.batch_size(_call_batch(args, kwargs, tensor), from_module=True)
                    timer.module_called(started)
            except Exception:  # noqa: BLE001 - never raise into the script
                pass
            return result

        functools.update_wrapper(generate, original)
        setattr(generate, MARK, True)
        mixin.generate = generate
        self._generate = (mixin, original)

    def _wrap_class(self, cls: type) -> None:
        original = cls.__call__
        own = cls.__dict__.get("__call__")
        watch, timer, clock = self, self._timer, self._clock
        anatomy, after_training = timer.anatomy, timer.after_training
        tensor = self._torch.Tensor
        grad_enabled = self._torch.is_grad_enabled
        inference_mode = self._torch.is_inference_mode_enabled

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            primary = watch._primary
            if watch._depth or primary is None or watch._generating:
                return original(module, *args, **kwargs)
            if primary() is not module:  # another model of the class (a copy, an EMA)
                if not getattr(module, "training", True):
                    after_training.untimed += 1  # served after training? then unseen
                return original(module, *args, **kwargs)
            try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                timer.batch_size(_call_batch(args, kwargs, tensor), from_module=True)
                if watch._shape_calls:
                    watch._input_shape_seen(args)
            except Exception:  # noqa: BLE001 - never raise into the script
                pass
            started = clock()
            watch._depth += 1
            try:  # noqa: SIM105 - hot path
                anatomy.enter(FORWARD, started)
            except Exception:  # noqa: BLE001
                pass
            try:
                result = original(module, *args, **kwargs)
            finally:
                watch._depth -= 1
                try:  # noqa: SIM105 - hot path
                    anatomy.leave(FORWARD)
                except Exception:  # noqa: BLE001
                    pass
            try:
                if not getattr(module, "training", True) or not grad_enabled():
                    timer.module_called(started)
                    if watch._growth is not None:
                        length = context_length(args, kwargs, tensor)
                        watch._growth.observe(length, clock() - started)
                if watch._grad_fact is not True and not getattr(module, "training", True):
                    watch._eval_call_recorded(grad_enabled() and not inference_mode())
            except Exception:  # noqa: BLE001
                pass
            return result

        setattr(__call__, MARK, True)
        cls.__call__ = __call__  # type: ignore[method-assign]
        self._wrapped[cls] = own
