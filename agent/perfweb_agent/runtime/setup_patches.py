"""Patches that record how the script set torch up: autocast, GradScaler, DataParallel and
DDP, the process group, and the first optimizer's settings (`optimizer_facts`). Each records
facts (and the scaler's counters) and never lets an agent error reach the script;
perfweb_agent.runtime.torch_patches installs them with the step and DataLoader hooks, under
the same mark, so installing twice is a no-op.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once
from perfweb_agent.runtime.torch_state import Counters
from perfweb_agent.runtime.training_facts import TrainingThreadFacts
from perfweb_agent.runtime.wrapping import wrap_once

MARK = "__perf_agent_wrapped__"


def wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `owner.name` by `make(original)`, once (the agent's patches' mark)."""
    wrap_once(owner, name, make, mark=MARK)


def guard(record: Callable[..., None], *args: Any) -> None:
    """Call `record(*args)` from inside a patched torch call; an error is said once."""
    try:
        record(*args)
    except Exception as exc:  # noqa: BLE001
        say_once(f"hook-{record.__name__}", "agent hook %s failed: %s", record.__name__, exc)


def autocast(torch: Any, facts: FactBuffer) -> None:
    """`amp.autocast*`: the first enabled autocast context the script enters."""
    cls = importlib.import_module("torch.amp.autocast_mode").autocast

    def record(ctx: Any) -> None:
        if not getattr(ctx, "_enabled", True):
            return
        facts.set("amp.autocast", True)
        facts.set("amp.autocast_device", str(getattr(ctx, "device", "")))
        facts.set("amp.autocast_dtype", str(getattr(ctx, "fast_dtype", "")))

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def __enter__(self: Any) -> Any:
            guard(record, self)
            return original(self)

        return __enter__

    wrap(cls, "__enter__", make)


def grad_scaler(torch: Any, facts: FactBuffer, counters: Counters) -> None:
    """`amp.grad_scaler*` and the GradScaler's step and update counts."""
    cls = importlib.import_module("torch.amp.grad_scaler").GradScaler

    def record_scaler(scaler: Any) -> None:
        facts.set("amp.grad_scaler", True)
        facts.set("amp.grad_scaler_enabled", bool(scaler.is_enabled()))

    def make_step(original: Callable[..., Any]) -> Callable[..., Any]:
        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            counters.scaler_steps += 1
            if counters.scaler_steps == 1:
                guard(record_scaler, self)
            return original(self, *args, **kwargs)

        return step

    def make_update(original: Callable[..., Any]) -> Callable[..., Any]:
        def update(self: Any, *args: Any, **kwargs: Any) -> Any:
            counters.scaler_updates += 1
            return original(self, *args, **kwargs)

        return update

    wrap(cls, "step", make_step)
    wrap(cls, "update", make_update)


def parallel(torch: Any, facts: FactBuffer, training: TrainingThreadFacts) -> None:
    """`parallel.mode` and the DataParallel / DDP settings of each wrapped model."""

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
            guard(record_dp, self)

        return __init__

    def make_ddp(original: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            guard(record_ddp, self, kwargs)

        return __init__

    wrap(torch.nn.DataParallel, "__init__", make_dp)
    wrap(torch.nn.parallel.DistributedDataParallel, "__init__", make_ddp)


def process_group(torch: Any, facts: FactBuffer) -> None:
    """`distributed.*`: the process group's backend, size, rank and init method."""
    dist = torch.distributed
    if not dist.is_available():
        return

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
            guard(record, args, kwargs)
            return result

        return init_process_group

    wrap(dist, "init_process_group", make)


def _redact(url: str) -> str:
    """Drop credentials from an init_method URL (user:pass@host)."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def optimizer_facts(optimizer: Any) -> dict[str, Any]:
    """`optimizer.*` of the first optimizer to step: its class, its `foreach` / `fused`
    settings (None: torch's default, a per-parameter loop on a CPU) and its parameter tensors
    (how many, their median size): what `optimizer.foreach` reads."""
    sizes = sorted(
        int(p.numel()) for group in optimizer.param_groups for p in group.get("params", ())
    )
    defaults = getattr(optimizer, "defaults", {}) or {}
    return {
        "optimizer.class": type(optimizer).__name__,
        "optimizer.module": type(optimizer).__module__,
        "optimizer.foreach": _setting(defaults, "foreach"),
        "optimizer.fused": _setting(defaults, "fused"),
        "optimizer.param_tensors": len(sizes),
        "optimizer.median_param_numel": sizes[len(sizes) // 2] if sizes else 0,
    }


def _setting(defaults: dict[str, Any], name: str) -> bool | str:
    """An optimizer's flag: True/False as set, "default" when left to torch, "absent" when
    the optimizer has no such setting (a hand-written one)."""
    if name not in defaults:
        return "absent"
    value = defaults[name]
    return "default" if value is None else bool(value)
