"""NVML collector: per-GPU metrics through an injectable query function.

The collector never calls pynvml directly: it calls `query(op, *args)`, where `op` names a
small operation ("utilization", "memory", "field_values", ...). `real_query` maps those to
nvidia-ml-py; tests pass a function that answers from recorded nvidia-smi values. A query
that raises `Unsupported` (or any NVML error) for a GPU is not asked again for that GPU:
a MIG-enabled GPU that has no utilisation counter simply reports none — nothing is invented.

Per GPU per tick: one field-values call (instant power, PCIe byte counters), then the
utilisation, memory, temperature, SM clock, clocks-event reasons and the energy counter.
Handles are cached; the process list is read every `process_every` ticks; GPM metrics where
supported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from perfweb_agent.core.buffer import Sample
from perfweb_agent.core.logger import say_once
from perfweb_contract.protocol import DeviceNaming

Query = Callable[..., Any]

FI_POWER_INSTANT = 186
FI_PCIE_TX_BYTES = 197
FI_PCIE_RX_BYTES = 198
FIELDS = (FI_POWER_INSTANT, FI_PCIE_TX_BYTES, FI_PCIE_RX_BYTES)


class Unsupported(Exception):
    """This GPU does not offer this value (NVML_ERROR_NOT_SUPPORTED and friends)."""


class _Gpu:
    """Cached per-GPU state: handle, what it does not support, counters for rates."""

    def __init__(self, index: int, handle: Any, key: str) -> None:
        self.index = index
        self.key = key
        self.handle = handle
        self.unsupported: set[str] = set()
        self.last_pcie: tuple[float, float, float] | None = None  # t, tx, rx
        self.gpm_sample: Any = None
        self.process_memory: float | None = None


class NvmlCollector:
    """`is_available()` + `collect()` for every GPU NVML can see."""

    def __init__(
        self,
        query: Query | None = None,
        *,
        clock: Callable[[], float] = time.time,
        pids: Callable[[], Iterable[int]] | None = None,
        process_every: int = 10,
        naming: DeviceNaming | None = None,
    ) -> None:
        self._query = query
        self._naming = naming or DeviceNaming()
        self._clock = clock
        self._pids = pids or (lambda: {os.getpid()})
        self.process_every = process_every
        self._gpus: list[_Gpu] | None = None
        self._ticks = 0
        self.driver_version: str | None = None
        self.error: str | None = None
        self._load_error: Exception | None = None

    def load(self) -> None:
        """Import NVML's bindings now, on the thread that starts the agent: the agent's own
        threads import nothing (a fork while one of them held a module's import lock leaves
        the child that lock held for ever). Initialising NVML waits for the sampler."""
        if self._query is None and self._load_error is None:
            try:
                self._query = real_query()
            except Exception as exc:  # noqa: BLE001 - ImportError, a broken install
                self._load_error = exc

    def is_available(self) -> bool:
        """Initialise NVML once; False (with one log line) when there is no NVML or GPU."""
        if self._gpus is not None:
            return bool(self._gpus)
        self._gpus = []
        try:
            if self._load_error is not None:
                raise self._load_error
            query = self._query = self._query or real_query()
            query("init")
            self.driver_version = str(query("driver_version"))
            count = int(query("device_count"))
            self._gpus = [_Gpu(i, query("handle", i), self._naming.gpu(i)) for i in range(count)]
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError, a broken driver
            self.error = f"{type(exc).__name__}: {exc}".strip()
            say_once(
                "no-nvml", "NVML not available (%s): no GPU metrics; the rest goes on", self.error
            )
            return False
        if not self._gpus:
            self.error = "no GPU"
            say_once("no-gpu", "NVML found no GPU: no GPU metrics; the rest goes on")
        return bool(self._gpus)

    def devices(self) -> list[dict[str, Any]]:
        """Device descriptors for `start` (name, uuid, memory total, power limit, MIG)."""
        if not self.is_available() or self._gpus is None:
            return []
        return [self._describe(gpu) for gpu in self._gpus]

    def facts(self) -> dict[str, Any]:
        """Facts: driver version and GPU count."""
        if not self.is_available():
            return {"nvml.available": False}
        return {
            "nvml.available": True,
            "nvml.driver_version": self.driver_version,
            "gpu.count": len(self._gpus or []),
        }

    def collect(self) -> list[Sample]:
        """One tick: samples for every GPU; a failing value is dropped, never invented."""
        if not self.is_available() or self._gpus is None:
            return []
        now = self._clock()
        read_processes = self._ticks % self.process_every == 0
        self._ticks += 1
        samples: list[Sample] = []
        for gpu in self._gpus:
            samples += self._collect_gpu(gpu, now, read_processes)
        return samples

    # ------------------------------------------------------------------ per GPU
    def _ask(self, gpu: _Gpu, op: str, *args: Any) -> Any:
        """Query once; remember ops this GPU does not support and return None for them."""
        if op in gpu.unsupported or self._query is None:
            return None
        try:
            return self._query(op, gpu.handle, *args)
        except Exception:  # noqa: BLE001 - NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST...
            gpu.unsupported.add(op)
            return None

    def _describe(self, gpu: _Gpu) -> dict[str, Any]:
        memory = self._ask(gpu, "memory")
        limit = self._ask(gpu, "power_limit")
        mig = self._ask(gpu, "mig_mode")
        device: dict[str, Any] = {
            "key": gpu.key,
            "kind": "gpu",
            "index": gpu.index,
            "uuid": self._ask(gpu, "uuid"),
            "name": self._ask(gpu, "name"),
            "memory_total": memory[1] if memory else None,
            "power_limit": limit / 1000.0 if limit else None,
        }
        if mig is not None:
            device["mig"] = bool(mig)
        return device

    def _collect_gpu(self, gpu: _Gpu, now: float, read_processes: bool) -> list[Sample]:
        values: dict[str, float] = {}
        self._read_fields(gpu, now, values)
        utilization = self._ask(gpu, "utilization")
        if utilization is not None:
            values["gpu.utilization"] = utilization[0]
            values["gpu.memory_utilization"] = utilization[1]
        memory = self._ask(gpu, "memory")
        if memory is not None:
            values["gpu.memory_used"] = memory[0]
        for op, name in (
            ("temperature", "gpu.temperature"),
            ("sm_clock", "gpu.sm_clock"),
            ("clocks_event_reasons", "gpu.throttle_reasons"),
        ):
            value = self._ask(gpu, op)
            if value is not None:
                values[name] = value
        energy = self._ask(gpu, "total_energy")  # mJ since the driver loaded (Volta+)
        if energy is not None:
            values["gpu.energy"] = energy / 1000.0
        if read_processes:
            gpu.process_memory = self._process_memory(gpu)
        if gpu.process_memory is not None:
            values["gpu.process_memory"] = gpu.process_memory
        values.update(self._gpm(gpu))
        return [(gpu.key, name, now, float(value)) for name, value in values.items()]

    def _read_fields(self, gpu: _Gpu, now: float, values: dict[str, float]) -> None:
        fields = self._ask(gpu, "field_values", FIELDS)
        if fields is None:
            power = self._ask(gpu, "power_usage")  # older drivers: milliwatts
            if power is not None:
                values["gpu.power"] = power / 1000.0
            return
        power, tx, rx = fields
        if power is not None:
            values["gpu.power"] = power / 1000.0  # the field is in milliwatts
        if tx is None or rx is None:
            return
        if gpu.last_pcie is not None and now > gpu.last_pcie[0]:
            elapsed = now - gpu.last_pcie[0]
            values["gpu.pcie_tx"] = max(0.0, (tx - gpu.last_pcie[1]) / elapsed)
            values["gpu.pcie_rx"] = max(0.0, (rx - gpu.last_pcie[2]) / elapsed)
        gpu.last_pcie = (now, tx, rx)

    def _process_memory(self, gpu: _Gpu) -> float | None:
        processes = self._ask(gpu, "processes")
        if processes is None:
            return None
        mine = set(self._pids())
        used = [memory for pid, memory in processes if pid in mine and memory is not None]
        return float(sum(used)) if used else 0.0

    def _gpm(self, gpu: _Gpu) -> dict[str, float]:
        if "gpm" in gpu.unsupported:
            return {}
        if gpu.gpm_sample is None and not self._ask(gpu, "gpm_supported"):
            gpu.unsupported.add("gpm")
            return {}
        sample = self._ask(gpu, "gpm_sample")
        if sample is None:
            gpu.unsupported.add("gpm")
            return {}
        previous, gpu.gpm_sample = gpu.gpm_sample, sample
        if previous is None:
            return {}
        metrics = self._ask(gpu, "gpm_metrics", previous, sample)
        return dict(metrics) if metrics else {}


def real_query() -> Query:
    """The query function backed by nvidia-ml-py's `pynvml` module (ImportError if absent)."""
    import pynvml

    from perfweb_agent.collectors.nvml_real import make_query

    return make_query(pynvml)
