"""The FLOPs of one step, counted once per run, and a CPU's peak measured on this host.

`StepFlops` counts step COUNT_STEP (a step the warm-up already keeps out of the medians:
the anatomy and the step times of every other step are untouched) under torch's
`FlopCounterMode`, entered at the boundary that opens the step and left at the one that
closes it, on the training thread. It records `flops.per_step` (the model's real operators:
forward, backward and optimizer, as torch counts them) and `flops.step`.

On a CPU run `cpu_peak` measures what this host's cores reach on a large float32 matmul at
the run's thread count (`cpu.peak_flops`, `cpu.peak_threads`): at exit, after the script's
last step, so it disturbs no step of the script. The recommender
turns these into achieved FLOP/s and model FLOP utilisation
(recommender/perfweb_recommender/compute.py).

The probe takes 0.1-0.4 s, which is 1-4% of a 10 s script (and of every round of an A/B
job), so `host_peak` keeps what it measured in a small file per host (`PeakCache`: the CPU
model, the cores the process may use, the thread count, torch's version) and a run shorter
than PROBE_ANYWAY_AFTER_S reuses an entry younger than PEAK_CACHE_TTL_S instead of probing.
A probe's figure is what the cores gave it at that moment, which a busy neighbour lowers,
and the steps it is compared with are slowed alike; so each entry also holds the rate of a
small matmul (SHARE_SIZE, a few milliseconds) measured with it, and a run that reuses the
entry measures that small matmul again at its exit: the peak it reports is the entry's
scaled by how much slower the small one runs now (`cpu.peak_share`), so `cpu.peak_flops`
means what the cores give this run either way. (A thread's run-queue wait cannot tell: under
OpenMP the threads that wait for a core are the pool's, while the caller spins.)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.core.logger import say_once

DYNAMO = "torch._dynamo"
NOT_COUNTED_WITHOUT_DYNAMO = (
    "not counted: torch's FLOP counter would import torch._dynamo into this process, "
    "which the script never imported (about a second inside a step)"
)
COUNT_STEP = 2  # the third step: past lazy initialisation, inside the warm-up left out
PROBE_MIN_SIZE = 512  # n of the probe's first n x n float32 matmul (2 n^3 FLOPs)
PROBE_MAX_SIZE = 2048
PROBE_MATMUL_S = 0.02  # the probe's matmul grows until one takes this long
PEAK_CACHE_FILE = "cpu_peak.json"
PEAK_CACHE_TTL_S = 7 * 24 * 3600.0  # an entry older than this is probed again
PROBE_ANYWAY_AFTER_S = 60.0  # a run this long probes (<= ~0.5% of it) and refreshes the entry
SHARE_SIZE = 512  # n of the small matmul that compares this run's share of the CPU
SHARE_REPEATS = 5


class StepFlops:
    """A step-timer listener: FlopCounterMode over step COUNT_STEP, then nothing.

    COUNT_STEP counts from the first training step (`training_from`, the timer's: module
    calls counted before the first optimizer step, an evaluation at iteration 0, are
    re-labelled and their indices skipped); a count under way when those calls were
    re-labelled measured them, not a training step, and starts again."""

    def __init__(
        self,
        torch: Any,
        facts: FactBuffer,
        *,
        step: int = COUNT_STEP,
        on_done: Callable[[], None] | None = None,
        timer: Any = None,  # the StepTimer: its training_from
    ) -> None:
        self._torch = torch
        self._facts = facts
        self._on_done = on_done
        self._step = step
        self._timer = timer
        self._base = 0  # training_from when the count began
        self._mode: Any = None
        self.done = False

    def __call__(self, index: int) -> None:
        """A boundary: `index` is the step that begins now."""
        if self.done:
            return
        base = getattr(self._timer, "training_from", None) or 0
        if self._mode is not None:
            if base == self._base:
                self._finish(index - 1)
                if self._on_done is not None:
                    self._on_done()
                return
            self._leave()  # the counted calls were re-labelled: not a training step
        if index >= base + self._step:
            self._base = base
            self._start()

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
        if DYNAMO not in sys.modules:
            # FlopCounterMode's dispatch imports torch._dynamo on its first use: ~1 s and
            # tens of MB inside the step it counts. A training script has it already (the
            # optimizers import it); a script that never did is not made to.
            self.done = True
            self._facts.set("flops.error", NOT_COUNTED_WITHOUT_DYNAMO)
            return
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


def matmul_rate(torch: Any, n: int, repeats: int) -> float:
    """The median FLOP/s of `repeats` float32 n x n matmuls after one warm-up."""
    with torch.no_grad():
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - started)
    return 2.0 * n**3 / max(sorted(times)[repeats // 2], 1e-9)


class PeakCache:
    """Probed CPU peaks, one JSON file per user (`PERF_AGENT_CACHE_DIR`): per key, the peak,
    the rate of the small matmul measured with it, the matmul size and when it was probed.
    Unreadable or unwritable, it is empty and the run probes: a cache never fails a run."""

    def __init__(self, directory: str, clock: Callable[[], float] = time.time) -> None:
        self.path = os.path.join(directory, PEAK_CACHE_FILE)
        self._clock = clock

    def fresh(self, key: str) -> dict[str, Any] | None:
        """The entry for `key` if it was probed less than PEAK_CACHE_TTL_S ago."""
        entry = self._entries().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            age = self._clock() - float(entry["probed_at"])
            usable = min(float(entry["peak_flops"]), float(entry["small_flops"])) > 0
        except (KeyError, TypeError, ValueError):
            return None
        return entry if usable and 0 <= age < PEAK_CACHE_TTL_S else None

    def store(self, key: str, peak_flops: float, small_flops: float, size: int) -> None:
        """Keep a probe's figures (unless a fresh entry has a higher peak: a peak)."""
        kept = self.fresh(key)
        if kept is not None and float(kept["peak_flops"]) >= peak_flops:
            return
        entries = self._entries()
        entries[key] = {
            "peak_flops": peak_flops,
            "small_flops": small_flops,
            "size": size,
            "probed_at": self._clock(),
        }
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=os.path.dirname(self.path), suffix=".tmp")
            with os.fdopen(fd, "w") as handle:
                json.dump({"entries": entries}, handle)
            os.replace(temporary, self.path)  # readers see the old file or the new, whole
        except OSError as exc:
            say_once("peak-cache", "cannot keep the CPU's peak in %s: %s", self.path, exc)

    def _entries(self) -> dict[str, Any]:
        try:
            with open(self.path) as handle:
                entries = json.load(handle).get("entries")
        except (OSError, ValueError, AttributeError):
            return {}
        return entries if isinstance(entries, dict) else {}


def peak_key(torch: Any) -> str:
    """What a probed peak depends on: the CPU, the cores this process may use, the thread
    count and torch's build (its matmul kernels)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next(
                (line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                "",
            )
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 0
    threads = torch.get_num_threads()
    return f"{model or 'cpu'}|cores={cores}|threads={threads}|torch={torch.__version__}"


def host_peak(
    torch: Any,
    cache: PeakCache,
    *,
    run_s: float,
    probe: Callable[[Any], dict[str, Any]] = cpu_peak,
    rate: Callable[[Any, int, int], float] = matmul_rate,
) -> dict[str, Any]:
    """The facts of the CPU's peak for this run: a fresh cache entry's, scaled by this run's
    share of the CPU (the small matmul's rate now against the entry's), when the run was
    shorter than PROBE_ANYWAY_AFTER_S; else probed now, and kept."""
    key = peak_key(torch)
    entry = cache.fresh(key) if run_s < PROBE_ANYWAY_AFTER_S else None
    if entry is not None:
        share = min(1.0, rate(torch, SHARE_SIZE, SHARE_REPEATS) / float(entry["small_flops"]))
        return {
            "cpu.peak_flops": float(entry["peak_flops"]) * share,
            "cpu.peak_threads": torch.get_num_threads(),
            "cpu.peak_size": int(entry["size"]),
            "cpu.peak_probed_at": float(entry["probed_at"]),
            "cpu.peak_share": round(share, 4),
        }
    facts = probe(torch)
    small = rate(torch, SHARE_SIZE, SHARE_REPEATS)
    cache.store(key, float(facts["cpu.peak_flops"]), small, int(facts["cpu.peak_size"]))
    return facts
