"""The FLOPs of one step, counted once per run, and a CPU's peak measured on this host.

`StepFlops` counts step COUNT_STEP (a step the warm-up already keeps out of the medians:
the anatomy and the step times of every other step are untouched) under torch's
`FlopCounterMode`, entered at the boundary that opens the step and left at the one that
closes it, on the training thread. It records `flops.per_step` (the model's real operators:
forward, backward and optimizer, as torch counts them) and `flops.step`.

On a CPU run `cpu_peak` measures what this host's cores reach on a large float32 matmul at
the run's thread count (`cpu.peak_flops`, `cpu.peak_threads`): at exit, after the script's
last step (~0.1 s), so it disturbs no step of the script. The recommender
turns these into achieved FLOP/s and model FLOP utilisation
(recommender/perfweb_recommender/compute.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once

COUNT_STEP = 2  # the third step: past lazy initialisation, inside the warm-up left out
PROBE_MIN_SIZE = 512  # n of the probe's first n x n float32 matmul (2 n^3 FLOPs)
PROBE_MAX_SIZE = 2048
PROBE_MATMUL_S = 0.02  # the probe's matmul grows until one takes this long


class StepFlops:
    """A step-timer listener: FlopCounterMode over step COUNT_STEP, then nothing."""

    def __init__(
        self,
        torch: Any,
        facts: FactBuffer,
        *,
        step: int = COUNT_STEP,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self._torch = torch
        self._facts = facts
        self._on_done = on_done
        self._step = step
        self._mode: Any = None
        self.done = False

    def __call__(self, index: int) -> None:
        """A boundary: `index` is the step that begins now."""
        if self.done:
            return
        if self._mode is None:
            if index == self._step:
                self._start()
            return
        self._finish(index - 1)
        if self._on_done is not None:
            self._on_done()

    @property
    def counting(self) -> bool:
        """FlopCounterMode is on: this step is being counted."""
        return self._mode is not None

    def close(self) -> None:
        """At exit: a count still open is dropped (its step never ended)."""
        if self._mode is not None:
            self._leave()
        self.done = True

    def _start(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            mode = FlopCounterMode(display=False)
            mode.__enter__()
            self._mode = mode
        except Exception as exc:  # noqa: BLE001 - no count: MFU says why it is absent
            self.done = True
            self._facts.set("flops.error", f"{type(exc).__name__}: {exc}"[:200])
            say_once("flops", "cannot count a step's FLOPs: %s", exc)

    def _finish(self, step: int) -> None:
        mode = self._mode
        self._leave()
        self.done = True
        try:
            total = int(mode.get_total_flops())
        except Exception as exc:  # noqa: BLE001
            self._facts.set("flops.error", f"{type(exc).__name__}: {exc}"[:200])
            return
        self._facts.update({"flops.per_step": float(total), "flops.step": step})

    def _leave(self) -> None:
        mode, self._mode = self._mode, None
        try:
            mode.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001 - a mode stack the script changed meanwhile
            self._facts.set("flops.error", f"{type(exc).__name__}: {exc}"[:200])


def cpu_peak(torch: Any) -> dict[str, Any]:
    """`cpu.peak_flops`: the median FLOP/s of three float32 n x n matmuls at the current
    thread count, n doubled from PROBE_MIN_SIZE (up to PROBE_MAX_SIZE) until a matmul after
    its warm-up takes PROBE_MATMUL_S: large enough for the cores' full speed, short enough
    that the probe costs ~0.1 s at exit on a usual host. The median, like the steps' median
    it is compared with: on a shared host the best of a few would be a moment the steps
    rarely see."""
    with torch.no_grad():
        n = PROBE_MIN_SIZE
        while True:
            a, b = torch.randn(n, n), torch.randn(n, n)
            torch.mm(a, b)  # warm-up at this size: threads woken, packing buffers
            started = time.perf_counter()
            torch.mm(a, b)
            if time.perf_counter() - started >= PROBE_MATMUL_S or n >= PROBE_MAX_SIZE:
                break
            n *= 2
        times = []
        for _ in range(3):
            started = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - started)
    median = sorted(times)[1]
    return {
        "cpu.peak_flops": 2.0 * n**3 / median,
        "cpu.peak_threads": torch.get_num_threads(),
        "cpu.peak_size": n,
    }
