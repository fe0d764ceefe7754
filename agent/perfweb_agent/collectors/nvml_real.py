"""The real NVML query function: each op of perfweb_agent.collectors.nvml mapped onto nvidia-ml-py
calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GPM_METRICS = (
    ("gpu.sm_active", "NVML_GPM_METRIC_SM_UTIL"),
    ("gpu.tensor_active", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("gpu.dram_active", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _field_value(nvml: Any, entry: Any) -> float | None:
    if entry.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    kinds = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    }
    attr = kinds.get(entry.valueType)
    return float(getattr(entry.value, attr)) if attr else None


def _processes(nvml: Any, handle: Any) -> list[tuple[int, float | None]]:
    found: dict[int, float | None] = {}
    for getter in (
        nvml.nvmlDeviceGetComputeRunningProcesses,
        nvml.nvmlDeviceGetGraphicsRunningProcesses,
    ):
        try:
            for proc in getter(handle):
                memory = getattr(proc, "usedGpuMemory", None)
                found[int(proc.pid)] = float(memory) if memory is not None else None
        except nvml.NVMLError:
            continue
    return list(found.items())


def _gpm_metrics(nvml: Any, handle: Any, first: Any, second: Any) -> dict[str, float]:
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRICS)
    request.sample1 = first
    request.sample2 = second
    for i, (_, constant) in enumerate(GPM_METRICS):
        request.metrics[i].metricId = getattr(nvml, constant)
    nvml.nvmlGpmMetricsGet(request)
    nvml.nvmlGpmSampleFree(first)
    return {
        name: float(request.metrics[i].value)
        for i, (name, _) in enumerate(GPM_METRICS)
        if request.metrics[i].nvmlReturn == nvml.NVML_SUCCESS
    }


def _gpm_sample(nvml: Any, handle: Any) -> Any:
    sample = nvml.nvmlGpmSampleAlloc()
    nvml.nvmlGpmSampleGet(handle, sample)
    return sample


def _gpm_supported(nvml: Any, handle: Any) -> bool:
    return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)


def _mig_mode(nvml: Any, handle: Any) -> int:
    return int(nvml.nvmlDeviceGetMigMode(handle)[0])


def make_query(nvml: Any) -> Callable[..., Any]:
    """Build `query(op, *args)` over the given pynvml module."""
    ops: dict[str, Callable[..., Any]] = {
        "init": nvml.nvmlInit,
        "driver_version": lambda: _text(nvml.nvmlSystemGetDriverVersion()),
        "device_count": nvml.nvmlDeviceGetCount,
        "handle": nvml.nvmlDeviceGetHandleByIndex,
        "name": lambda h: _text(nvml.nvmlDeviceGetName(h)),
        "uuid": lambda h: _text(nvml.nvmlDeviceGetUUID(h)),
        "mig_mode": lambda h: _mig_mode(nvml, h),
        "power_limit": nvml.nvmlDeviceGetEnforcedPowerLimit,
        "power_usage": nvml.nvmlDeviceGetPowerUsage,
        "field_values": lambda h, ids: [
            _field_value(nvml, e) for e in nvml.nvmlDeviceGetFieldValues(h, list(ids))
        ],
        "utilization": lambda h: (lambda u: (u.gpu, u.memory))(
            nvml.nvmlDeviceGetUtilizationRates(h)
        ),
        "memory": lambda h: (lambda m: (m.used, m.total))(nvml.nvmlDeviceGetMemoryInfo(h)),
        "temperature": lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
        "sm_clock": lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
        "clocks_event_reasons": nvml.nvmlDeviceGetCurrentClocksEventReasons,
        "total_energy": nvml.nvmlDeviceGetTotalEnergyConsumption,
        "processes": lambda h: _processes(nvml, h),
        "gpm_supported": lambda h: _gpm_supported(nvml, h),
        "gpm_sample": lambda h: _gpm_sample(nvml, h),
        "gpm_metrics": lambda h, a, b: _gpm_metrics(nvml, h, a, b),
    }

    def query(op: str, *args: Any) -> Any:
        return ops[op](*args)

    return query
