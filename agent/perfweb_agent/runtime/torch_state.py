"""Reads torch's state from the agent thread: facts and CUDA memory, never initialising CUDA.

Everything here only looks: `torch.cuda.is_initialized()` gates every CUDA call, so a CPU
run, or a GPU run before its first CUDA op, never gets a CUDA context from the agent.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from perfweb_agent.core.buffer import Sample
from perfweb_contract.cpulist import format_cpu_list
from perfweb_contract.protocol import DeviceNaming

DIST_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class Counters:
    """Call counts the facts report per step (plain ints: a race only loses a count); the
    torch patches (perfweb_agent.runtime.torch_patches) count them."""

    def __init__(self) -> None:
        self.empty_cache = 0
        self.synchronize = 0
        self.scaler_steps = 0
        self.scaler_updates = 0
        # torch.get_num_threads() as the training thread sees it (TorchPatches reads it at
        # step boundaries): OpenMP's count is per thread, and the agent's own thread keeps
        # the one it first saw when the script calls set_num_threads after it
        self.intra_op_threads: int | None = None


def imported_torch() -> Any | None:
    """The script's torch module if it has finished importing, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    spec = getattr(torch, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    return torch if hasattr(torch, "__version__") and hasattr(torch, "cuda") else None


def inside_backward(torch: Any) -> bool:
    """True while this thread runs a node of a backward pass: a gradient hook, a custom
    Function's backward, a reentrant checkpoint's inner backward, an optimizer stepped from
    a post-accumulate-grad hook. The autograd engine runs each node under a
    ThreadLocalStateGuard, which puts the thread-local state (torch's profiler callbacks and
    profiler state among it) back as it was when the backward began once the node returns:
    a profiler started or stopped there is undone behind torch's back. False on a torch
    that cannot tell."""
    current = getattr(torch._C, "_current_graph_task_id", None)
    try:
        return current is not None and current() != -1
    except Exception:  # noqa: BLE001
        return False


def cuda_initialized(torch: Any) -> bool:
    """True only if the script already created a CUDA context."""
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001
        return False


def static_facts(torch: Any) -> dict[str, Any]:
    """Facts that do not change during a run: versions, thread settings, launch env."""
    facts: dict[str, Any] = {
        "torch.version": str(torch.__version__),
        "torch.cuda_version": getattr(torch.version, "cuda", None),
        "python.version": sys.version.split()[0],
        "threads.omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "threads.mkl_num_threads": os.environ.get("MKL_NUM_THREADS"),
        "host.cpu_count": os.cpu_count(),
        "host.usable_cores": _usable_cores(),
        "host.affinity": _affinity(),
        "env.cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "env.pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    for name in DIST_ENV:
        facts[f"env.{name.lower()}"] = os.environ.get(name)
    return {k: v for k, v in facts.items() if v is not None}


def dynamic_facts(torch: Any, counters: Counters, steps: int) -> dict[str, Any]:
    """Facts the script may change while it runs: flags, threads, CUDA state, call counts."""
    facts: dict[str, Any] = {
        "threads.intra_op": counters.intra_op_threads or torch.get_num_threads(),
        "threads.inter_op": torch.get_num_interop_threads(),
        "cudnn.benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda.initialized": cuda_initialized(torch),
        "cuda.empty_cache_calls": counters.empty_cache,
        "cuda.synchronize_calls": counters.synchronize,
        "steps.count": steps,
    }
    if steps:
        facts["cuda.empty_cache_per_step"] = round(counters.empty_cache / steps, 3)
        facts["cuda.synchronize_per_step"] = round(counters.synchronize / steps, 3)
    if counters.scaler_steps:
        facts["amp.scaler_steps"] = counters.scaler_steps
        facts["amp.scaler_updates"] = counters.scaler_updates
        facts["amp.scaler_step_without_update"] = (
            counters.scaler_steps > counters.scaler_updates + 1
        )
    if facts["cuda.initialized"]:
        facts.update(_cuda_facts(torch))
    facts.update(_dist_facts(torch))
    trainer = framework_trainer()
    if trainer is not None:
        facts["framework.trainer"] = trainer
    return facts


# The trainer modules a framework imports only once its Trainer is used, and the name each
# is reported as (`framework.trainer`): the fix snippets follow the framework's own settings.
TRAINER_MODULES = (
    ("transformers.trainer", "transformers"),
    ("lightning.pytorch.trainer.trainer", "lightning"),
    ("pytorch_lightning.trainer.trainer", "lightning"),
)


def framework_trainer() -> str | None:
    """ "transformers" (Hugging Face Trainer), "lightning", or None for a plain loop."""
    for module, name in TRAINER_MODULES:
        if module in sys.modules:
            return name
    return None


def cuda_memory(torch: Any, wall_time: float, naming: DeviceNaming | None = None) -> list[Sample]:
    """Allocated/reserved/peak bytes of the current CUDA device, if CUDA is initialised."""
    if not cuda_initialized(torch):
        return []
    cuda = torch.cuda
    index = cuda.current_device()
    device = (naming or DeviceNaming()).gpu(nvml_index(index))
    return [
        (device, "torch.cuda_allocated", wall_time, float(cuda.memory_allocated(index))),
        (device, "torch.cuda_reserved", wall_time, float(cuda.memory_reserved(index))),
        (device, "torch.cuda_peak", wall_time, float(cuda.max_memory_allocated(index))),
    ]


def nvml_index(torch_index: int) -> int | str:
    """Map a torch device index to the NVML index through CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return torch_index
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if torch_index < len(parts) and parts[torch_index].isdigit():
        return int(parts[torch_index])
    return torch_index


def _cuda_facts(torch: Any) -> dict[str, Any]:
    cuda = torch.cuda
    index = cuda.current_device()
    facts: dict[str, Any] = {
        "cuda.current_device": index,
        "cuda.device_count": cuda.device_count(),
        "cuda.device_name": cuda.get_device_name(index),
        "cudnn.version": torch.backends.cudnn.version(),
    }
    major, minor = cuda.get_device_capability(index)
    facts["cuda.capability"] = f"{major}.{minor}"
    local_rank = os.environ.get("LOCAL_RANK", "")
    if local_rank.isdigit():  # LOCAL_RANK must pick the device, or two ranks share one GPU
        facts["distributed.local_rank_matches_device"] = int(local_rank) == index
    return facts


def _dist_facts(torch: Any) -> dict[str, Any]:
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return {}
    return {
        "distributed.initialized": True,
        "distributed.backend": str(dist.get_backend()),
        "distributed.world_size": dist.get_world_size(),
        "distributed.rank": dist.get_rank(),
    }


def _affinity() -> str | None:
    """The cores this process may run on, as `taskset -c` writes them: "0-3,8"."""
    try:
        return format_cpu_list(os.sched_getaffinity(0)) or None
    except (AttributeError, OSError):
        return None


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
