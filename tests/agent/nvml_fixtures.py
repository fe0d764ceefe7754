"""Recorded NVML answers, from the nvidia-smi captures in shared/peer-traces/nvidia-smi/.

`linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt` (load: gpu-burn + 2 memhogs) and
`linux-x86_64__nvidia-h100-mig__590.48.01.txt` (MIG enabled: utilisation is N/A).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

MIB = 1024 * 1024

H100_LOAD: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "mig_mode": 0,
    "power_limit": 700_000,  # mW
    "utilization": (100, 10),
    "memory": (19818 * MIB, 81559 * MIB),
    "temperature": 63,
    "sm_clock": 1980,
    "clocks_event_reasons": 0,
    "power_mw": 625_680,
    "processes": [(11327, 2566 * MIB), (11328, 1542 * MIB), (11345, 15690 * MIB)],
    "gpm_supported": True,
}

H100_MIG: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "mig_mode": 1,
    "power_limit": 700_000,
    "utilization": None,  # "[N/A]" under MIG: NVML answers NOT_SUPPORTED
    "memory": (11125 * MIB, 81559 * MIB),
    "temperature": 55,
    "sm_clock": 1980,
    "clocks_event_reasons": 0,
    "power_mw": 438_000,
    "processes": [(21180, 2296 * MIB), (21198, 7484 * MIB)],
    "gpm_supported": False,
}


class NotSupported(Exception):
    """Stands in for pynvml.NVMLError_NotSupported."""


class RecordedNvml:
    """A query function answering from recorded values; counts every call by op."""

    def __init__(self, gpus: list[dict[str, Any]], driver: str = "590.48.01") -> None:
        self.gpus = gpus
        self.driver = driver
        self.calls: Counter[str] = Counter()
        self.pcie_tx = 0.0
        self.pcie_rx = 0.0
        self.gpm_counter = 0
        self.energy_mj = 3.6e9  # a synthetic counter: 1 kWh already used when first read

    def __call__(self, op: str, *args: Any) -> Any:
        self.calls[op] += 1
        if op == "init":
            return None
        if op == "driver_version":
            return self.driver
        if op == "device_count":
            return len(self.gpus)
        if op == "handle":
            return ("handle", args[0])
        gpu = self.gpus[args[0][1]]
        if op == "field_values":
            if gpu["mig_mode"]:
                return [gpu["power_mw"], None, None]
            self.pcie_tx += 2e9  # 2 GB more per call
            self.pcie_rx += 1e9
            return [gpu["power_mw"], self.pcie_tx, self.pcie_rx]
        if op == "total_energy":
            if gpu["mig_mode"]:
                raise NotSupported(op)
            self.energy_mj += gpu["power_mw"]  # one second at the recorded power per call
            return self.energy_mj
        if op == "gpm_sample":
            self.gpm_counter += 1
            return self.gpm_counter
        if op == "gpm_metrics":
            return {"gpu.sm_active": 97.5, "gpu.tensor_active": 61.0, "gpu.dram_active": 12.5}
        value = gpu.get(op)
        if value is None:
            raise NotSupported(op)
        return value
