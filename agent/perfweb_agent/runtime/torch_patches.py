"""Hooks into the script's torch, installed once the script itself has imported torch.

Each patch is tiny, records into the agent's buffers or counters, and never lets an agent
error reach the script. Patches are marked so that installing twice is a no-op.
"""

from __future__ import annotations

import importlib
import time
import weakref
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime import anatomy as phases
from perfweb_agent.runtime import setup_patches
from perfweb_agent.runtime.accumulation import AccumulationWatch
from perfweb_agent.runtime.eval_loops import EvaluationLoops
from perfweb_agent.runtime.loader_stats import LoaderStats
from perfweb_agent.runtime.modules import ModuleWatch, leading_dimension
from perfweb_agent.runtime.setup_patches import guard as _guard
from perfweb_agent.runtime.setup_patches import optimizer_facts
from perfweb_agent.runtime.setup_patches import wrap as _wrap
from perfweb_agent.runtime.steps import StepTimer
from perfweb_agent.runtime.torch_state import Counters, inside_backward
from perfweb_agent.runtime.training_facts import TrainingThreadFacts

# torch.distributed calls timed as the `collective` phase (DDP's own all-reduces run inside
# backward, in C++: they count as backward)
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
)


LOADER_INDEX = "_perf_agent_loader"  # set on each DataLoader iterator: its loader's index

THREADS_EVERY = 16  # boundaries between two readings of the training thread's count


class TorchPatches:
    """Installs the step, DataLoader and fact hooks into an imported torch."""

    def __init__(self, timer: StepTimer, facts: FactBuffer, counters: Counters) -> None:
        self.timer = timer
        self.facts = facts
        self.counters = counters
        self._loaders: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.installed = False
        self._handles: list[Any] = []
        self.training = TrainingThreadFacts(facts)
        self.accumulation = AccumulationWatch(facts)
        self._module_watch: ModuleWatch | None = None
        self.loader_stats = LoaderStats()

    def install(self, torch: Any) -> None:
        """Install every hook; each one that fails is skipped with one log line."""
        if self.installed:
            return
        self.installed = True
        self.facts.set("training.backward", False)
        # CUDA events time the phases once the script itself initialised CUDA
        self.timer.anatomy.cuda_check = getattr(torch.cuda, "is_initialized", None)
        for step in (
            self._optimizer_hook,
            self._dataloader,
            self._cuda_counters,
            self._backward,
            self._modules,
            self._autocast,
            self._grad_scaler,
            self._parallel,
            self._process_group,
            self.accumulation.install,  # before: its post-hook must not be the last
            self._copies,
            self._collectives,
            self.training.install,
            self._training_threads,
        ):
            try:
                step(torch)
            except Exception as exc:  # noqa: BLE001
                say_once(f"install-{step.__name__}", "cannot hook %s: %s", step.__name__, exc)

    def _training_threads(self, torch: Any) -> None:
        """At every THREADS_EVERY-th boundary, on the training thread, its intra-op thread
        count (Counters.intra_op_threads says why not the agent thread's)."""
        counters, get_threads = self.counters, torch.get_num_threads

        def read(index: int) -> None:
            if index % THREADS_EVERY == 0 or counters.intra_op_threads is None:
                counters.intra_op_threads = get_threads()

        self.timer.listeners.append(read)

    def _optimizer_hook(self, torch: Any) -> None:
        module = importlib.import_module("torch.optim.optimizer")
        timer, loaders = self.timer, self.loader_stats
        anatomy = timer.anatomy
        optimizer_phase = phases.OPTIMIZER

        facts, described = self.facts, [False]

        def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                anatomy.enter(optimizer_phase)
            except Exception:  # noqa: BLE001
                pass
            if not described[0]:
                described[0] = True
                _guard(facts.update, optimizer_facts(optimizer))

        def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            try:
                anatomy.leave(optimizer_phase)
                timer.optimizer_stepped(optimizer)
                if loaders.fetched:
                    loaders.optimizer_stepped()
            except Exception:  # noqa: BLE001
                pass

        # the post-hook first: bench/agent_overhead*.py toggle it as _handles[0]
        self._handles.append(module.register_optimizer_step_post_hook(post_hook))
        self._handles.append(module.register_optimizer_step_pre_hook(pre_hook))

    def _dataloader(self, torch: Any) -> None:
        module = importlib.import_module("torch.utils.data.dataloader")
        timer, clock = self.timer, time.perf_counter
        anatomy, data_phase = timer.anatomy, phases.DATA
        record_loader = self._record_loader
        tensor = torch.Tensor
        stats = self.loader_stats

        def make_next(original: Callable[..., Any]) -> Callable[..., Any]:
            def __next__(self: Any) -> Any:
                started = clock()
                if timer.wants_loader:
                    try:  # noqa: SIM105 - hot path; and an agent bug must not mask StopIteration
                        timer.fetch_started()
                    except Exception:  # noqa: BLE001
                        pass
                timer.fetching = True
                try:  # noqa: SIM105 - hot path
                    anatomy.enter(data_phase)
                except Exception:  # noqa: BLE001
                    pass
                handed = False
                try:
                    batch = original(self)
                    handed = True
                finally:
                    timer.fetching = False
                    try:  # noqa: SIM105 - hot path; and an agent bug must not mask StopIteration
                        anatomy.leave(data_phase)
                        seconds = clock() - started
                        timer.data_wait(started, seconds)
                        index = getattr(self, LOADER_INDEX, -1)
                        if handed:
                            stats.fetched_batch(index, seconds)
                        else:  # StopIteration (or the loader's own error): it ran out
                            stats.ran_out(index)
                    except Exception:  # noqa: BLE001
                        pass
                if timer.wants_loader:
                    try:  # noqa: SIM105 - hot path
                        timer.fetch_done(leading_dimension(batch, tensor))
                    except Exception:  # noqa: BLE001
                        pass
                return batch

            return __next__

        def make_init(original: Callable[..., Any]) -> Callable[..., Any]:
            def __init__(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
                original(self, loader, *args, **kwargs)
                _guard(record_loader, loader, self)

            return __init__

        _wrap(module._BaseDataLoaderIter, "__next__", make_next)
        _wrap(module._BaseDataLoaderIter, "__init__", make_init)

    def _record_loader(self, loader: Any, iterator: Any) -> None:
        known = self._loaders.get(loader)
        if known is not None:
            setattr(iterator, LOADER_INDEX, known)
            self.loader_stats.new_iterator(known)
            return
        index = self._loaders[loader] = len(self._loaders)
        setattr(iterator, LOADER_INDEX, index)
        prefix = f"dataloader.{index}."
        workers = int(getattr(loader, "num_workers", 0) or 0)
        self.facts.update(
            {
                prefix + "batch_size": getattr(loader, "batch_size", None),
                prefix + "num_workers": workers,
                prefix + "pin_memory": bool(getattr(loader, "pin_memory", False)),
                prefix + "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
                prefix + "prefetch_factor": getattr(loader, "prefetch_factor", None),
                prefix + "dataset": type(getattr(loader, "dataset", None)).__name__,
                "dataloader.count": len(self._loaders),
            }
        )

    def _cuda_counters(self, torch: Any) -> None:
        counters = self.counters

        def make_empty_cache(original: Callable[..., Any]) -> Callable[..., Any]:
            def empty_cache(*args: Any, **kwargs: Any) -> Any:
                counters.empty_cache += 1
                return original(*args, **kwargs)

            return empty_cache

        def make_synchronize(original: Callable[..., Any]) -> Callable[..., Any]:
            def synchronize(*args: Any, **kwargs: Any) -> Any:
                counters.synchronize += 1
                return original(*args, **kwargs)

            return synchronize

        _wrap(torch.cuda, "empty_cache", make_empty_cache)
        _wrap(torch.cuda, "synchronize", make_synchronize)

    def _backward(self, torch: Any) -> None:
        """Every backward pass ends a step when nothing better does (hand-written updates).

        Only an outermost one: a backward run from inside another (a reentrant checkpoint
        recomputes its segment and runs its own backward inside the loss's) is part of
        that step, and a boundary there would fall inside a backward pass
        (torch_state.inside_backward)."""
        autograd = torch.autograd
        facts, timer = self.facts, self.timer
        anatomy, backward_phase = timer.anatomy, phases.BACKWARD
        seen = [False]

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def backward(*args: Any, **kwargs: Any) -> Any:
                try:  # noqa: SIM105 - hot path
                    anatomy.enter(backward_phase)
                except Exception:  # noqa: BLE001
                    pass
                try:
                    result = original(*args, **kwargs)
                finally:
                    try:  # noqa: SIM105 - hot path
                        anatomy.leave(backward_phase)
                    except Exception:  # noqa: BLE001
                        pass
                if not seen[0]:
                    seen[0] = True
                    _guard(facts.set, "training.backward", True)
                try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                    if not inside_backward(torch):
                        timer.backward_done()
                except Exception:  # noqa: BLE001
                    pass
                return result

            return backward

        _wrap(autograd, "backward", make)

    def _copies(self, torch: Any) -> None:
        """`Tensor.to` / `.cuda()` / `.cpu()` to another kind of device: the copy phases."""
        anatomy = self.timer.anatomy
        compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        tensor, device = torch.Tensor, torch.device

        def timed(
            original: Callable[..., Any], self: Any, phase: int, args: Any, kwargs: Any
        ) -> Any:
            try:  # noqa: SIM105 - hot path
                anatomy.enter(phase)
            except Exception:  # noqa: BLE001
                pass
            try:
                return original(self, *args, **kwargs)
            finally:
                try:  # noqa: SIM105 - hot path
                    anatomy.leave(phase)
                except Exception:  # noqa: BLE001
                    pass

        def make_to(original: Callable[..., Any]) -> Callable[..., Any]:
            def to(self: Any, *args: Any, **kwargs: Any) -> Any:
                if compiling():  # torch.compile traces this: leave it nothing to trace
                    return original(self, *args, **kwargs)
                try:
                    phase = _copy_phase(self, args, kwargs, tensor, device)
                except Exception:  # noqa: BLE001
                    phase = None
                if phase is None:
                    return original(self, *args, **kwargs)
                return timed(original, self, phase, args, kwargs)

            return to

        def make_move(target: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def make(original: Callable[..., Any]) -> Callable[..., Any]:
                def move(self: Any, *args: Any, **kwargs: Any) -> Any:
                    if compiling() or self.device.type == target:
                        return original(self, *args, **kwargs)
                    phase = phases.OUTPUT_COPY if target == "cpu" else phases.COPY
                    return timed(original, self, phase, args, kwargs)

                return move

            return make

        _wrap(tensor, "to", make_to)
        _wrap(tensor, "cuda", make_move("cuda"))
        _wrap(tensor, "cpu", make_move("cpu"))

    def _collectives(self, torch: Any) -> None:
        """torch.distributed's collectives and point-to-point calls: the collective phase."""
        dist = torch.distributed
        if not dist.is_available():
            return
        anatomy, phase = self.timer.anatomy, phases.COLLECTIVE

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def collective(*args: Any, **kwargs: Any) -> Any:
                try:  # noqa: SIM105 - hot path
                    anatomy.enter(phase)
                except Exception:  # noqa: BLE001
                    pass
                try:
                    return original(*args, **kwargs)
                finally:
                    try:  # noqa: SIM105 - hot path
                        anatomy.leave(phase)
                    except Exception:  # noqa: BLE001
                        pass

            return collective

        for name in COLLECTIVES:
            _wrap(dist, name, make)

    def _modules(self, torch: Any) -> None:
        """Finds the primary outermost module and times its calls (see
        agent/perfweb_agent/runtime/modules.py)."""
        self._module_watch = ModuleWatch(torch, self.timer, facts=self.facts)
        self._module_watch.install()
        EvaluationLoops(self.timer).install()  # a trainer's evaluation is no request served

    def _autocast(self, torch: Any) -> None:
        setup_patches.autocast(torch, self.facts)

    def _grad_scaler(self, torch: Any) -> None:
        setup_patches.grad_scaler(torch, self.facts, self.counters)

    def _parallel(self, torch: Any) -> None:
        setup_patches.parallel(torch, self.facts, self.training)

    def _process_group(self, torch: Any) -> None:
        setup_patches.process_group(torch, self.facts)


def _copy_phase(
    value: Any, args: tuple[Any, ...], kwargs: dict[str, Any], tensor: Any, device: Any
) -> int | None:
    """The copy phase of `value.to(*args, **kwargs)`: COPY to an accelerator, OUTPUT_COPY
    back to the host, None when it stays on its kind of device (a dtype change)."""
    target = kwargs.get("device")
    if target is None and args:
        target = args[0]
    if isinstance(target, str):
        kind = target.split(":", 1)[0]
    elif isinstance(target, device):
        kind = target.type
    elif isinstance(target, tensor):
        kind = target.device.type
    elif isinstance(target, int) and not isinstance(target, bool):
        kind = "cuda"
    else:
        return None
    here = value.device.type
    if kind == here:
        return None
    return phases.OUTPUT_COPY if kind == "cpu" else phases.COPY
