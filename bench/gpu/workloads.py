"""Small training workloads with one planted cause each, for the real-GPU check.

    python bench/gpu/workloads.py NAME [--device cuda|cpu] [--smoke] [--min-steps N]
        [--min-seconds S] [--max-steps N] [--max-seconds S] [--idle-seconds S] [--result FILE]

Runs the workload until it has done at least `--min-steps` steps and `--min-seconds` seconds,
never more than `--max-steps` steps or `--max-seconds` seconds, then writes one JSON object
(per-step wall times, the wall time to the last finished GPU work) to `--result` (else
stdout). Each workload is a plain training loop with an optimizer, so the agent finds its
steps by itself; it is meant to run under `perf-agent attach --offline DIR`.

Needs only torch and the standard library (it is copied to the GPU machine as it is).
`--smoke` (and `--device cpu`) uses tiny sizes so every workload runs a few steps anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

Step = Callable[[], None]
GIB = 1 << 30


@dataclass(frozen=True)
class Context:
    """Where a workload runs and how big it is."""

    device: str
    smoke: bool
    idle_seconds: float = 20.0
    full_size: bool | None = None  # None: GPU sizes on CUDA outside smoke mode

    @property
    def cuda(self) -> bool:
        """Whether the workload runs on a GPU."""
        return self.device.startswith("cuda")

    def size(self, gpu: Any, small: Any) -> Any:
        """The GPU-sized value, or the small one on CPU and in smoke mode."""
        full = self.cuda and not self.smoke if self.full_size is None else self.full_size
        return gpu if full else small

    def autocast(self, dtype: torch.dtype) -> Any:
        """An autocast context for this device."""
        return torch.autocast(device_type="cuda" if self.cuda else "cpu", dtype=dtype)


@dataclass(frozen=True)
class Limits:
    """Bounds of the loop: at least min steps and seconds, at most max steps and seconds."""

    min_steps: int = 40
    min_seconds: float = 8.0
    max_steps: int = 100_000
    max_seconds: float = 25.0


def mlp(features: int, width: int, depth: int, classes: int = 10) -> nn.Sequential:
    """`depth` hidden Linear+ReLU layers of `width` units and a classifier head."""
    layers: list[nn.Module] = []
    size = features
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    layers.append(nn.Linear(size, classes))
    return nn.Sequential(*layers)


def device_batches(
    ctx: Context, rows: int, features: int, count: int = 4
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A few batches made once, already on the device (no input pipeline at all)."""
    generator = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(rows, features, generator=generator).to(ctx.device),
            torch.randint(0, 10, (rows,), generator=generator).to(ctx.device),
        )
        for _ in range(count)
    ]


def cycle(batches: list[Any]) -> Iterator[Any]:
    """Endless round-robin over `batches`."""
    while True:
        yield from batches


def sgd_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
    ctx: Context, dtype: torch.dtype | None,
) -> torch.Tensor:  # fmt: skip
    """Forward (under autocast when `dtype` is given), backward, optimizer step; the loss."""
    if dtype is None:
        loss = nn.functional.cross_entropy(model(x), y)
    else:
        with ctx.autocast(dtype):
            loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def trained(ctx: Context, features: int, width: int, depth: int) -> tuple[nn.Module, Any]:
    """A fresh model on the device and its optimizer."""
    torch.manual_seed(0)
    model = mlp(features, width, depth).to(ctx.device)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def tensor_cores_allowed() -> None:
    """TF32 for fp32 matmuls: the healthy default wherever the plant is not precision."""
    torch.set_float32_matmul_precision("high")


def mixed_precision() -> torch.dtype:
    """bf16 everywhere: the GPU's tensor cores and the CPU both run it."""
    return torch.bfloat16


# ---------------------------------------------------------------------------------- inputs
class PrebuiltBatches(Dataset):
    """A map-style dataset of whole prebuilt batches (no collation cost): `batch_size=None`."""

    def __init__(self, rows: int, features: int, count: int = 8) -> None:
        generator = torch.Generator().manual_seed(1)
        self.batches = [
            (torch.randn(rows, features, generator=generator), torch.randint(0, 10, (rows,)))
            for _ in range(count)
        ]

    def __len__(self) -> int:
        return 1_000_000  # never an epoch boundary inside a run

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[index % len(self.batches)]


class SlowSamples(Dataset):
    """Samples made by per-sample Python and tensor work: a CPU-bound input pipeline."""

    def __init__(self, features: int, work: int) -> None:
        self.features = features
        self.work = work

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        x = torch.rand(self.features, generator=generator)
        for _ in range(self.work):  # the "augmentation": many small operators per sample
            x = (x * 1.0001).clamp_(0.0, 1.0).sqrt_().pow_(2.0)
        return x, index % 10


def endless(loader: DataLoader) -> Iterator[Any]:
    """Iterate a DataLoader forever (epochs back to back)."""
    while True:
        yield from loader


def to_device(ctx: Context, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """Copy a batch to the device the way most scripts do: `.to(device, non_blocking=True)`."""
    return [t.to(ctx.device, non_blocking=True) for t in tensors]


# ---------------------------------------------------------------------------------- workloads
def pageable_h2d(ctx: Context) -> Step:
    """Planted: a DataLoader with `pin_memory=False` feeding 8 MB batches to the GPU."""
    tensor_cores_allowed()
    rows, features = ctx.size((1024, 2048), (32, 64))
    workers = ctx.size(4, 0)
    loader = DataLoader(
        PrebuiltBatches(rows, features),
        batch_size=None,
        num_workers=workers,
        pin_memory=False,
        persistent_workers=workers > 0,
    )
    # ~0.36 TFLOP a step: compute of the same order as the copy, so pinned (asynchronous)
    # copies have something to overlap with, as in a real input pipeline.
    model, optimizer = trained(ctx, features, ctx.size(4096, 32), ctx.size(4, 2))
    batches = endless(loader)

    def step() -> None:
        x, y = to_device(ctx, *next(batches))
        sgd_step(model, optimizer, x, y, ctx, mixed_precision())

    return step


def fp32_matmul(ctx: Context) -> Step:
    """Planted: fp32 Linear layers, no autocast, TF32 off (PyTorch's default), on a tensor-core
    GPU."""
    torch.set_float32_matmul_precision("highest")
    model, optimizer = trained(ctx, ctx.size(4096, 64), ctx.size(4096, 64), ctx.size(4, 2))
    batches = cycle(device_batches(ctx, ctx.size(1024, 16), ctx.size(4096, 64)))

    def step() -> None:
        x, y = next(batches)
        sgd_step(model, optimizer, x, y, ctx, None)

    return step


def fp32_conv(ctx: Context) -> Step:
    """Planted: an fp32 convolutional net, no autocast, cuDNN's TF32 off."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # isolate the precision cause from autotuning
    channels, side, rows = ctx.size(128, 8), ctx.size(64, 16), ctx.size(64, 4)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, 10),
    ).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(rows, 3, side, side, generator=generator).to(ctx.device)
    labels = torch.randint(0, 10, (rows,), generator=generator).to(ctx.device)

    def step() -> None:
        sgd_step(model, optimizer, images, labels, ctx, None)

    return step


def _healthy_parts(ctx: Context) -> tuple[nn.Module, Any, Iterator[Any]]:
    tensor_cores_allowed()
    features = ctx.size(2048, 64)
    model, optimizer = trained(ctx, features, ctx.size(4096, 64), ctx.size(4, 2))
    return model, optimizer, cycle(device_batches(ctx, ctx.size(2048, 16), features))


def empty_cache(ctx: Context) -> Step:
    """Planted: `torch.cuda.empty_cache()` after every step."""
    model, optimizer, batches = _healthy_parts(ctx)

    def step() -> None:
        x, y = next(batches)
        sgd_step(model, optimizer, x, y, ctx, mixed_precision())
        torch.cuda.empty_cache()  # the plant (a no-op without CUDA; the agent counts it)

    return step


def item_sync(ctx: Context) -> Step:
    """Planted: the loss read with `.item()` every step (a blocking device-to-host sync)."""
    model, optimizer, batches = _healthy_parts(ctx)
    history: list[float] = []

    def step() -> None:
        x, y = next(batches)
        loss = sgd_step(model, optimizer, x, y, ctx, mixed_precision())
        history.append(loss.item())  # the plant
        del history[:-100]

    return step


def launch_bound(ctx: Context) -> Step:
    """Planted: a deep, narrow MLP over batches of 4: kernels of a few microseconds."""
    tensor_cores_allowed()
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(4096, 64, generator=generator), torch.randint(0, 10, (4096,))
    )
    loader = DataLoader(data, batch_size=4, shuffle=True, pin_memory=ctx.cuda)
    model, optimizer = trained(ctx, 64, 64, ctx.size(24, 3))
    batches = endless(loader)

    def step() -> None:
        x, y = to_device(ctx, *next(batches))
        sgd_step(model, optimizer, x, y, ctx, mixed_precision())

    return step


def input_bound(ctx: Context) -> Step:
    """Planted: per-sample CPU work in the main process (`num_workers=0`) feeding the GPU."""
    tensor_cores_allowed()
    features = ctx.size(1024, 64)
    loader = DataLoader(
        SlowSamples(features, work=ctx.size(12, 2)),
        batch_size=ctx.size(128, 8),
        num_workers=0,
        pin_memory=ctx.cuda,
    )
    model, optimizer = trained(ctx, features, ctx.size(2048, 32), ctx.size(2, 1))
    batches = endless(loader)

    def step() -> None:
        x, y = to_device(ctx, *next(batches))
        sgd_step(model, optimizer, x, y, ctx, mixed_precision())

    return step


def fp16_no_scaler(ctx: Context) -> Step:
    """Planted: fp16 autocast with a GradScaler constructed disabled (`enabled=False`)."""
    model, optimizer, batches = _healthy_parts(ctx)
    scaler = torch.amp.GradScaler("cuda" if ctx.cuda else "cpu", enabled=False)  # the plant

    def step() -> None:
        x, y = next(batches)
        with ctx.autocast(torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


def idle_held(ctx: Context) -> Step:
    """Planted: a short burst of training, then the process sits idle holding 4 GiB.

    The idle part runs inside the last step (`--idle-seconds`), so the loop's bounds do not
    cut it short; the kit gives it one step limit more than the burst.
    """
    model, optimizer, batches = _healthy_parts(ctx)
    held = torch.empty(ctx.size(4 * GIB, 1 << 20), dtype=torch.uint8, device=ctx.device)
    held.fill_(1)
    done = [0]

    def step() -> None:
        x, y = next(batches)
        sgd_step(model, optimizer, x, y, ctx, mixed_precision())
        done[0] += 1
        if done[0] == BURST_STEPS:
            if ctx.cuda:
                torch.cuda.synchronize()
            time.sleep(ctx.idle_seconds)  # the plant: memory held, nothing running
        assert held.numel() > 0

    return step


BURST_STEPS = 40  # after the kit's profiler window (steps 30-35): the trace shows the burst


def healthy_bf16(ctx: Context) -> Step:
    """No plant: bf16 autocast, data already on the GPU, no syncs, TF32 allowed."""
    model, optimizer, batches = _healthy_parts(ctx)

    def step() -> None:
        x, y = next(batches)
        sgd_step(model, optimizer, x, y, ctx, mixed_precision())

    return step


def bf16_matmul(ctx: Context) -> Step:
    """No plant: four 8192-wide bf16 Linear layers over batches of 8192, data on the GPU:
    a loop of large matmuls that should run near the device's bf16 peak."""
    width = ctx.size(8192, 64)
    torch.manual_seed(0)
    layers = [nn.Linear(width, width, bias=False) for _ in range(4)]
    model = nn.Sequential(*layers).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6, foreach=True)
    x = torch.randn(ctx.size(8192, 16), width).to(ctx.device)

    def step() -> None:
        with ctx.autocast(torch.bfloat16):
            loss = model(x).float().square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


WORKLOADS: dict[str, Callable[[Context], Step]] = {
    "pageable_h2d": pageable_h2d,
    "fp32_matmul": fp32_matmul,
    "fp32_conv": fp32_conv,
    "empty_cache": empty_cache,
    "item_sync": item_sync,
    "launch_bound": launch_bound,
    "input_bound": input_bound,
    "fp16_no_scaler": fp16_no_scaler,
    "idle_held": idle_held,
    "bf16_matmul": bf16_matmul,
    "healthy_bf16": healthy_bf16,
}


# ---------------------------------------------------------------------------------- driver
def drive(step: Step, limits: Limits, *, cuda: bool) -> dict[str, Any]:
    """Run `step` within `limits`; per-step wall times and the synchronised total."""
    times: list[float] = []
    started = last = time.perf_counter()
    while len(times) < limits.max_steps:
        elapsed = last - started
        if elapsed >= limits.max_seconds:
            break
        if len(times) >= limits.min_steps and elapsed >= limits.min_seconds:
            break
        step()
        now = time.perf_counter()
        times.append(now - last)
        last = now
    if cuda:
        torch.cuda.synchronize()
    return {"steps": len(times), "step_s": times, "wall_s": time.perf_counter() - started}


def run_workload(
    name: str, *, device: str = "cpu", smoke: bool = False, limits: Limits | None = None,
    idle_seconds: float = 20.0,
) -> dict[str, Any]:  # fmt: skip
    """Build and drive one workload; its result (what the script writes)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda, but torch sees no CUDA device")
    ctx = Context(device=device, smoke=smoke, idle_seconds=idle_seconds)
    if not ctx.cuda:
        # On a CPU the loop is the whole workload: OpenMP threads spinning against the agent's
        # thread (and other jobs) on a small machine would measure the machine, not the kit.
        torch.set_num_threads(1)
    if name == "idle_held":
        limits = Limits(
            min_steps=BURST_STEPS + 5,
            min_seconds=0.0,
            max_steps=BURST_STEPS + 5,
            max_seconds=(limits or Limits()).max_seconds + idle_seconds,
        )
    result = drive(WORKLOADS[name](ctx), limits or Limits(), cuda=ctx.cuda)
    result.update(workload=name, device=device, smoke=smoke, torch=torch.__version__)
    if ctx.cuda:
        result["gpu"] = torch.cuda.get_device_name()
        result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", choices=sorted(WORKLOADS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--min-steps", type=int, default=Limits.min_steps)
    parser.add_argument("--min-seconds", type=float, default=Limits.min_seconds)
    parser.add_argument("--max-steps", type=int, default=Limits.max_steps)
    parser.add_argument("--max-seconds", type=float, default=Limits.max_seconds)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--result", help="write the JSON result here (default: stdout)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    args = _parser().parse_args(argv)
    limits = Limits(args.min_steps, args.min_seconds, args.max_steps, args.max_seconds)
    result = run_workload(
        args.name,
        device=args.device,
        smoke=args.smoke,
        limits=limits,
        idle_seconds=args.idle_seconds,
    )
    text = json.dumps(result)
    if args.result:
        with open(args.result, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
