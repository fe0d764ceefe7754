"""Applying knobs inside the user's process, without editing the script.

Environment-level knobs (threads, expandable_segments) are written to os.environ at once, so
torch sees them when it is imported. Torch-level knobs wait for the script's own `import
torch` (a post-import hook); the agent never imports torch itself. Every patch is guarded:
a knob that cannot apply is reported as skipped and the script runs unchanged.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from perfweb_agent.core.importhook import when_imported
from perfweb_contract.knobs import KnobValue, whole_number
from perfweb_contract.loaders import ENV_KNOB_LOADER, LOADER_KNOBS

_status: dict[str, str] = {}
_lock = threading.Lock()


def status() -> dict[str, str]:
    """Knob name -> "pending" | "applied" | "skipped: why" | "error: why", for the facts."""
    with _lock:
        return dict(_status)


def _set(name: str, state: str) -> None:
    with _lock:
        _status[name] = state


def install(settings: dict[str, KnobValue]) -> dict[str, str]:
    """Apply `settings` now (environment) and when torch is imported (everything else)."""
    for name in settings:
        _set(name, "pending")
    _apply_environment(settings)
    torch_settings = {k: v for k, v in settings.items() if k != "expandable_segments"}
    if torch_settings:
        after_torch_import(lambda torch: _apply_torch(torch, torch_settings))
    return status()


def after_torch_import(callback: Callable[[types.ModuleType], None]) -> None:
    """Call `callback(torch)` now if the script imported torch, else right after it does."""

    def guarded(torch: types.ModuleType) -> None:
        try:
            callback(torch)
        except Exception as error:  # never raise into the user's import
            _set("*", f"error: {type(error).__name__}: {error}")

    when_imported("torch", guarded)


def _apply_environment(settings: dict[str, KnobValue]) -> None:
    if "threads" in settings:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(settings["threads"])
    if "expandable_segments" in settings:
        flag = "True" if settings["expandable_segments"] else "False"
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = _merge_alloc_conf(
            os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "expandable_segments", flag
        )
        _set("expandable_segments", "applied")
        if "torch" in sys.modules:
            _set("expandable_segments", "skipped: torch was imported before the agent")


def _merge_alloc_conf(current: str, key: str, value: str) -> str:
    """`current` with `key:value` set, other allocator options kept."""
    parts = [p for p in current.split(",") if p.strip() and p.split(":")[0].strip() != key]
    return ",".join([*parts, f"{key}:{value}"])


def _apply_torch(torch: Any, settings: dict[str, KnobValue]) -> None:
    for name, applier in _TORCH_APPLIERS:
        if name in settings:
            try:
                _set(name, applier(torch, settings))
            except Exception as error:
                _set(name, f"error: {type(error).__name__}: {error}")
    dataloader_knobs = [name for name in _DATALOADER_KNOBS if name in settings]
    if dataloader_knobs:  # one patch of DataLoader.__init__ covers all four
        target = knob_loader()
        at_init = settings
        if target is not None:  # the training loader's alone, at its first iterator
            at_init = {k: v for k, v in settings.items() if k not in LOADER_KNOBS}
        try:
            state = "applied"
            if any(name in at_init for name in _DATALOADER_KNOBS):
                state = _patch_dataloader(torch, at_init)
            if target is not None:
                _patch_one_loader(torch, settings, target)
        except Exception as error:
            state = f"error: {type(error).__name__}: {error}"
        for name in dataloader_knobs:
            _set(name, state)
    model_knobs = [name for name in _MODEL_KNOBS if name in settings]
    if model_knobs:
        try:
            _wrap_outermost_module(torch, settings)
        except Exception as error:
            _set(model_knobs[0], f"error: {error}")


# --- DataLoader: num_workers, pin_memory, persistent_workers, batch_size ----------------------

_DATALOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "batch_size")


def dataloader_overrides(arguments: dict[str, Any], settings: dict[str, KnobValue]) -> dict:
    """The DataLoader keyword arguments to change, given the caller's bound `arguments`.

    Keeps the combination valid: no prefetch_factor or persistent workers without workers,
    and batch_size only where the DataLoader owns batching (no batch_sampler, not None).
    """
    changes: dict[str, Any] = {}
    workers = arguments.get("num_workers", 0)
    if "num_workers" in settings:
        workers = changes["num_workers"] = settings["num_workers"]
    if "pin_memory" in settings:
        changes["pin_memory"] = settings["pin_memory"]
    if "persistent_workers" in settings and workers:
        changes["persistent_workers"] = settings["persistent_workers"]
    if not workers:
        if arguments.get("persistent_workers"):
            changes["persistent_workers"] = False
        if arguments.get("prefetch_factor") is not None:
            changes["prefetch_factor"] = None
    owns_batching = arguments.get("batch_sampler") is None and arguments.get("batch_size", 1)
    if "batch_size" in settings and owns_batching:
        changes["batch_size"] = settings["batch_size"]
    return changes


def knob_loader(environ: Mapping[str, str] | None = None) -> int | None:
    """The loader `PERF_AGENT_KNOB_LOADER` names (its N, in the order the script first
    iterates its DataLoaders, as the agent's `dataloader.N` facts), None when unset or bad."""
    raw = (os.environ if environ is None else environ).get(ENV_KNOB_LOADER, "").strip()
    number = whole_number(raw) if raw else None
    return number if number is not None and number >= 0 else None


def retune_loader(loader: Any, settings: Mapping[str, KnobValue]) -> None:
    """Set a made DataLoader's workers, pinning and persistence before its first iterator,
    keeping the combination valid (a prefetch factor only with workers)."""
    if "num_workers" in settings:
        workers = int(settings["num_workers"])
        loader.num_workers = workers
        if workers > 0 and getattr(loader, "prefetch_factor", None) is None:
            loader.prefetch_factor = 2  # what DataLoader.__init__ picks with workers
        elif workers == 0:
            loader.prefetch_factor = None
    if "pin_memory" in settings:
        loader.pin_memory = bool(settings["pin_memory"])
    if "persistent_workers" in settings and loader.num_workers > 0:
        # DataLoader refuses the attribute once made; before its first iterator it is safe
        object.__setattr__(loader, "persistent_workers", bool(settings["persistent_workers"]))


def _patch_one_loader(torch: Any, settings: dict[str, KnobValue], target: int) -> None:
    """Apply the DataLoader knobs to loader `target` alone, at its first `iter()`."""
    cls = torch.utils.data.DataLoader
    original = cls.__iter__
    original = getattr(original, "_perf_agent_original", original)
    wanted = {k: v for k, v in settings.items() if k in LOADER_KNOBS}
    order: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        try:
            if self not in order:
                order[self] = len(order)
                if order[self] == target:
                    retune_loader(self, wanted)
        except Exception:  # noqa: BLE001 - the loader keeps the script's settings
            pass
        return original(self)

    __iter__._perf_agent_original = original  # type: ignore[attr-defined]
    cls.__iter__ = __iter__


def _patch_dataloader(torch: Any, settings: dict[str, KnobValue]) -> str:
    cls = torch.utils.data.DataLoader
    original = cls.__init__
    if getattr(original, "_perf_agent_original", None) is not None:
        original = original._perf_agent_original
    signature = inspect.signature(original)
    wanted = {k: v for k, v in settings.items() if k in _DATALOADER_KNOBS}

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments.update(dataloader_overrides(dict(bound.arguments), wanted))
            args, kwargs = bound.args[1:], bound.kwargs
        except Exception:
            pass  # unusual call shape: leave the user's arguments as they were
        original(self, *args, **kwargs)

    __init__._perf_agent_original = original  # type: ignore[attr-defined]
    cls.__init__ = __init__
    return "applied"


# --- process-wide switches --------------------------------------------------------------------


def _apply_threads(torch: Any, settings: dict[str, KnobValue]) -> str:
    threads = int(settings["threads"])
    original = torch.set_num_threads
    original = getattr(original, "_perf_agent_original", original)
    original(threads)

    @functools.wraps(original)
    def set_num_threads(_requested: int) -> None:  # the knob wins over the script's own call
        original(threads)

    set_num_threads._perf_agent_original = original  # type: ignore[attr-defined]
    torch.set_num_threads = set_num_threads
    return "applied"


def _apply_cudnn_benchmark(torch: Any, settings: dict[str, KnobValue]) -> str:
    torch.backends.cudnn.benchmark = bool(settings["cudnn_benchmark"])
    return "applied"


def _apply_tf32(torch: Any, settings: dict[str, KnobValue]) -> str:
    enabled = bool(settings["tf32"])
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    return "applied"


def _apply_empty_cache_off(torch: Any, settings: dict[str, KnobValue]) -> str:
    def empty_cache(*_args: Any, **_kwargs: Any) -> None:
        """perf-agent knob empty_cache=off: the cache is kept."""

    # Replace the primitive under torch.cuda.empty_cache, so that wrappers around the public
    # function (the agent's call counter) keep counting the script's calls.
    if hasattr(torch._C, "_cuda_emptyCache"):
        torch._C._cuda_emptyCache = empty_cache
    else:  # a CPU-only build: nothing to free, keep the public function harmless too
        torch.cuda.empty_cache = empty_cache
        torch.cuda.memory.empty_cache = empty_cache
    return "applied"


_TORCH_APPLIERS: tuple[tuple[str, Callable[[Any, dict[str, KnobValue]], str]], ...] = (
    ("threads", _apply_threads),
    ("cudnn_benchmark", _apply_cudnn_benchmark),
    ("tf32", _apply_tf32),
    ("empty_cache", _apply_empty_cache_off),
)


# --- the model: quantize, channels_last, amp, compile, inference_mode --------------------------

# Knobs applied to the outermost module at its first call, in this order: quantize and
# channels_last change the model itself; the others wrap its forward, inference_mode outermost.
_MODEL_KNOBS = ("quantize", "channels_last", "amp", "compile", "inference_mode")


def _wrap_outermost_module(torch: Any, settings: dict[str, KnobValue]) -> None:
    """Prepare the first outermost module call that has parameters (the model).

    Quantisation and channels_last change the model in place; its instance `forward` is
    replaced by one that runs under bf16 autocast, through torch.compile and/or under
    inference_mode (see `_MODEL_KNOBS`); then the temporary hook on nn.Module.__call__
    removes itself, so there is no per-call cost for the rest of the run. Nested calls are
    never wrapped twice.
    """
    module_cls = torch.nn.Module
    original_call = module_cls.__call__
    local = threading.local()

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(local, "depth", 0) or module_cls.__call__ is not __call__:
            return original_call(self, *args, **kwargs)
        if _has_parameters(self):
            module_cls.__call__ = original_call
            try:
                _prepare_model(torch, self, settings)
            except Exception as error:  # the script runs its model unchanged
                for name in _MODEL_KNOBS:
                    if name in settings and status().get(name) == "pending":
                        _set(name, f"error: {type(error).__name__}: {error}")
            return original_call(self, *args, **kwargs)
        local.depth = 1  # a parameter-free outer call (e.g. a loss): look inside it
        try:
            return original_call(self, *args, **kwargs)
        finally:
            local.depth = 0

    module_cls.__call__ = __call__


def _has_parameters(module: Any) -> bool:
    return next(iter(module.parameters()), None) is not None


def _prepare_model(torch: Any, model: Any, settings: dict[str, KnobValue]) -> None:
    device_type = next(iter(model.parameters())).device.type  # before quantisation packs them
    if "quantize" in settings:
        _set("quantize", _quantize_dynamic(torch, model, device_type))
    forward = model.forward
    if settings.get("channels_last"):
        forward, state = _channels_last(torch, model, forward)
        _set("channels_last", state)
    elif "channels_last" in settings:
        _set("channels_last", "skipped: channels_last=false leaves the model as it is")
    if "amp" in settings:
        forward = _autocast_forward(torch, forward, device_type)
        _set("amp", f"applied: bf16 autocast on {type(model).__name__} ({device_type})")
    if "compile" in settings:
        reason = _compile_unsafe_reason(torch, model)
        if reason:
            _set("compile", f"skipped: {reason}")
        else:
            torch._dynamo.config.suppress_errors = True  # a failed compile falls back to eager
            forward = torch.compile(forward, mode=str(settings["compile"]))
            _set("compile", f"applied: {settings['compile']} on {type(model).__name__}")
    if settings.get("inference_mode"):
        forward = _inference_mode_forward(torch, model, forward)
        _set("inference_mode", f"applied: inference_mode on {type(model).__name__} in eval()")
    elif "inference_mode" in settings:
        _set("inference_mode", "skipped: inference_mode=false leaves autograd as it is")
    model.forward = forward


def _quantize_dynamic(torch: Any, model: Any, device_type: str) -> str:
    """Swap the model's nn.Linear layers for int8 dynamically quantised ones, in place.

    Through torch.ao.quantization.quantize_dynamic (fbgemm/x86 int8 kernels). torchao, the
    maintained home of quantisation, installs beside torch 2.13 but its int8 dynamic path runs
    eagerly on CPU through tensor subclasses: on a 512-2048-512 MLP (batch 32, one thread) it
    took 7.4 ms against 10.5 ms fp32 and 0.42 ms here. torch.ao's deprecation warning is kept
    out of the script's output. Quantised layers have no gradients, so a model in training
    mode is left alone; weights are quantised once, activations per call.
    """
    cls_name = type(model).__name__
    if model.training:
        return f"skipped: {cls_name} is in training mode (quantize=dynamic is for inference)"
    linear = torch.nn.Linear
    if isinstance(model, linear):
        return "skipped: the model is a bare nn.Linear (nothing to swap it into in place)"
    count = sum(1 for module in model.modules() if type(module) is linear)
    if not count:
        return f"skipped: {cls_name} has no nn.Linear layer"
    if device_type != "cpu":
        return "skipped: dynamic int8 quantisation runs on CPU models only"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.ao.quantization is deprecated" (see above)
        torch.ao.quantization.quantize_dynamic(model, {linear}, dtype=torch.qint8, inplace=True)
    return f"applied: int8 dynamic quantisation of {count} nn.Linear in {cls_name}"


def _channels_last(torch: Any, model: Any, forward: Callable) -> tuple[Callable, str]:
    """The model's 4-D weights in channels_last, and a forward converting 4-D float inputs."""
    if not any(p.dim() == 4 for p in model.parameters()):
        return forward, f"skipped: {type(model).__name__} has no 4-D (convolution) weights"
    memory_format = torch.channels_last
    model.to(memory_format=memory_format)
    tensor = torch.Tensor

    def convert(value: Any) -> Any:
        if isinstance(value, tensor) and value.dim() == 4 and value.is_floating_point():
            return value.contiguous(memory_format=memory_format)
        return value

    @functools.wraps(forward)
    def channels_last_forward(*args: Any, **kwargs: Any) -> Any:
        args = tuple(convert(value) for value in args)
        kwargs = {key: convert(value) for key, value in kwargs.items()}
        return forward(*args, **kwargs)

    return channels_last_forward, f"applied: channels_last on {type(model).__name__}"


def _inference_mode_forward(torch: Any, model: Any, forward: Callable) -> Callable:
    """`forward` under torch.inference_mode() whenever the model is in eval() mode.

    The mode is read per call: a training loop's own forward keeps autograd (its validation
    passes in eval() get inference mode, whose outputs nobody differentiates).
    """

    @functools.wraps(forward)
    def inference_forward(*args: Any, **kwargs: Any) -> Any:
        if model.training:
            return forward(*args, **kwargs)
        with torch.inference_mode():
            return forward(*args, **kwargs)

    return inference_forward


def _autocast_forward(torch: Any, forward: Callable, device_type: str) -> Callable:
    @functools.wraps(forward)
    def autocast_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    return autocast_forward


def _compile_unsafe_reason(torch: Any, model: Any) -> str:
    """Why torch.compile is not safe here, or "" when it is."""
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is None or not dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python/torch"
    parallel = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    if isinstance(model, parallel):
        return "the model is wrapped in DataParallel/DistributedDataParallel"
    if type(model).__name__ == "OptimizedModule":
        return "the model is already compiled"
    return ""
