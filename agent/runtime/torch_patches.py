"""Hooks into the script's torch, installed once the script itself has imported torch.

Each patch is tiny, records into the agent's buffers or counters, and never lets an agent
error reach the script. Patches are marked so that installing twice is a no-op.
"""

from __future__ import annotations

import functools
import importlib
import time
import weakref
from collections.abc import Callable
from typing import Any

from perfweb_agent.runtime.buffer import FactBuffer
from perfweb_agent.runtime.logger import say_once
from perfweb_agent.runtime.modules import ModuleWatch, leading_dimension
from perfweb_agent.runtime.steps import StepTimer
from perfweb_agent.runtime.training_facts import TrainingThreadFacts

MARK = "__perf_agent_wrapped__"


class Counters:
    """Call counts the facts report per step (plain ints: a race only loses a count)."""

    def __init__(self) -> None:
        self.empty_cache = 0
        self.synchronize = 0
        self.scaler_steps = 0
        self.scaler_updates = 0


def _wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = getattr(owner, name, None)
    if original is None or getattr(original, MARK, False):
        return
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, MARK, True)
    setattr(owner, name, wrapper)


def _guard(record: Callable[..., None], *args: Any) -> None:
    try:
        record(*args)
    except Exception as exc:  # noqa: BLE001
        say_once(f"hook-{record.__name__}", "agent hook %s failed: %s", record.__name__, exc)


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
        self._module_watch: ModuleWatch | None = None

    def install(self, torch: Any) -> None:
        """Install every hook; each one that fails is skipped with one log line."""
        if self.installed:
            return
        self.installed = True
        self.facts.set("training.backward", False)
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
            self.training.install,
        ):
            try:
                step(torch)
            except Exception as exc:  # noqa: BLE001
                say_once(f"install-{step.__name__}", "cannot hook %s: %s", step.__name__, exc)

    def _optimizer_hook(self, torch: Any) -> None:
        module = importlib.import_module("torch.optim.optimizer")
        timer = self.timer

        def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                timer.optimizer_stepped(optimizer)
            except Exception:  # noqa: BLE001
                pass

        self._handles.append(module.register_optimizer_step_post_hook(post_hook))

    def _dataloader(self, torch: Any) -> None:
        module = importlib.import_module("torch.utils.data.dataloader")
        timer, clock = self.timer, time.perf_counter
        record_loader = self._record_loader
        tensor = torch.Tensor

        def make_next(original: Callable[..., Any]) -> Callable[..., Any]:
            def __next__(self: Any) -> Any:
                started = clock()
                if timer.wants_loader:
                    try:  # noqa: SIM105 - hot path; and an agent bug must not mask StopIteration
                        timer.fetch_started()
                    except Exception:  # noqa: BLE001
                        pass
                timer.fetching = True
                try:
                    batch = original(self)
                finally:
                    timer.fetching = False
                    try:  # noqa: SIM105 - hot path; and an agent bug must not mask StopIteration
                        timer.data_wait(started, clock() - started)
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
                _guard(record_loader, loader)

            return __init__

        _wrap(module._BaseDataLoaderIter, "__next__", make_next)
        _wrap(module._BaseDataLoaderIter, "__init__", make_init)

    def _record_loader(self, loader: Any) -> None:
        if loader in self._loaders:
            return
        index = self._loaders[loader] = len(self._loaders)
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
        """Every backward pass ends a step when nothing better does (hand-written updates)."""
        autograd = torch.autograd
        facts, timer = self.facts, self.timer
        seen = [False]

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def backward(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                if not seen[0]:
                    seen[0] = True
                    _guard(facts.set, "training.backward", True)
                try:  # noqa: SIM105 - hot path: a plain try is cheaper than contextlib.suppress
                    timer.backward_done()
                except Exception:  # noqa: BLE001
                    pass
                return result

            return backward

        _wrap(autograd, "backward", make)

    def _modules(self, torch: Any) -> None:
        """Finds the primary outermost module and times its calls (see agent/runtime/modules.py)."""
        self._module_watch = ModuleWatch(torch, self.timer, facts=self.facts)
        self._module_watch.install()

    def _autocast(self, torch: Any) -> None:
        cls = importlib.import_module("torch.amp.autocast_mode").autocast
        facts = self.facts

        def record(ctx: Any) -> None:
            if not getattr(ctx, "_enabled", True):
                return
            facts.set("amp.autocast", True)
            facts.set("amp.autocast_device", str(getattr(ctx, "device", "")))
            facts.set("amp.autocast_dtype", str(getattr(ctx, "fast_dtype", "")))

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def __enter__(self: Any) -> Any:
                _guard(record, self)
                return original(self)

            return __enter__

        _wrap(cls, "__enter__", make)

    def _grad_scaler(self, torch: Any) -> None:
        cls = importlib.import_module("torch.amp.grad_scaler").GradScaler
        counters, facts = self.counters, self.facts

        def record_scaler(scaler: Any) -> None:
            facts.set("amp.grad_scaler", True)
            facts.set("amp.grad_scaler_enabled", bool(scaler.is_enabled()))

        def make_step(original: Callable[..., Any]) -> Callable[..., Any]:
            def step(self: Any, *args: Any, **kwargs: Any) -> Any:
                counters.scaler_steps += 1
                if counters.scaler_steps == 1:
                    _guard(record_scaler, self)
                return original(self, *args, **kwargs)

            return step

        def make_update(original: Callable[..., Any]) -> Callable[..., Any]:
            def update(self: Any, *args: Any, **kwargs: Any) -> Any:
                counters.scaler_updates += 1
                return original(self, *args, **kwargs)

            return update

        _wrap(cls, "step", make_step)
        _wrap(cls, "update", make_update)

    def _parallel(self, torch: Any) -> None:
        facts, training = self.facts, self.training

        def record_dp(module: Any) -> None:
            facts.set("parallel.mode", "dataparallel")
            facts.set("parallel.device_ids", str(getattr(module, "device_ids", "")))

        def record_ddp(module: Any, kwargs: dict[str, Any]) -> None:
            facts.set("parallel.mode", "ddp")
            facts.set(
                "ddp.find_unused_parameters", bool(getattr(module, "find_unused_parameters", False))
            )
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                facts.set("distributed.backend", str(dist.get_backend()))
            facts.set("ddp.device_ids", str(kwargs.get("device_ids")))
            training.watch_ddp(module)

        def make_dp(original: Callable[..., Any]) -> Callable[..., Any]:
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                original(self, *args, **kwargs)
                _guard(record_dp, self)

            return __init__

        def make_ddp(original: Callable[..., Any]) -> Callable[..., Any]:
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                original(self, *args, **kwargs)
                _guard(record_ddp, self, kwargs)

            return __init__

        _wrap(torch.nn.DataParallel, "__init__", make_dp)
        _wrap(torch.nn.parallel.DistributedDataParallel, "__init__", make_ddp)

    def _process_group(self, torch: Any) -> None:
        dist = torch.distributed
        if not dist.is_available():
            return
        facts = self.facts

        def record(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            backend = kwargs.get("backend", args[0] if args else None)
            init_method = kwargs.get("init_method", args[1] if len(args) > 1 else None)
            if dist.is_initialized():
                backend = dist.get_backend()
                facts.set("distributed.world_size", dist.get_world_size())
                facts.set("distributed.rank", dist.get_rank())
            facts.set("distributed.backend", str(backend))
            facts.set("distributed.init_method", _redact(str(init_method or "env://")))

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def init_process_group(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                _guard(record, args, kwargs)
                return result

            return init_process_group

        _wrap(dist, "init_process_group", make)


def _redact(url: str) -> str:
    """Drop credentials from an init_method URL (user:pass@host)."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
