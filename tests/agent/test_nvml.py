"""NVML logic without a GPU: recorded answers through the injected query function."""

from __future__ import annotations

import logging

import pytest

from perfweb_agent.collectors.nvml import NvmlCollector
from perfweb_agent.core import logger as agent_log
from tests.agent.nvml_fixtures import H100_LOAD, H100_MIG, MIB, RecordedNvml


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def by_name(samples: list[tuple[str, str, float, float]]) -> dict[tuple[str, str], float]:
    return {(device, name): value for device, name, _, value in samples}


def test_it_reads_an_h100_under_load() -> None:
    query, clock = RecordedNvml([H100_LOAD]), Clock()
    nvml = NvmlCollector(query, clock=clock, pids=lambda: {11345})
    first = by_name(nvml.collect())
    clock.now += 1.0
    second = by_name(nvml.collect())
    assert first[("gpu:0", "gpu.utilization")] == 100
    assert first[("gpu:0", "gpu.memory_utilization")] == 10
    assert first[("gpu:0", "gpu.memory_used")] == 19818 * MIB
    assert first[("gpu:0", "gpu.power")] == pytest.approx(625.68)
    assert first[("gpu:0", "gpu.temperature")] == 63
    assert first[("gpu:0", "gpu.sm_clock")] == 1980
    assert first[("gpu:0", "gpu.throttle_reasons")] == 0
    assert first[("gpu:0", "gpu.process_memory")] == 15690 * MIB  # only this job's pid
    assert ("gpu:0", "gpu.pcie_tx") not in first  # a rate needs two readings
    assert second[("gpu:0", "gpu.pcie_tx")] == pytest.approx(2e9)
    assert second[("gpu:0", "gpu.pcie_rx")] == pytest.approx(1e9)
    assert second[("gpu:0", "gpu.sm_active")] == 97.5
    assert second[("gpu:0", "gpu.tensor_active")] == 61.0
    # the energy counter, mJ in NVML, in joules: one second at 625.68 W between the readings
    assert second[("gpu:0", "gpu.energy")] - first[("gpu:0", "gpu.energy")] == pytest.approx(625.68)


def test_one_field_values_call_per_gpu_per_tick_handles_cached_processes_less_often() -> None:
    query = RecordedNvml([H100_LOAD, H100_LOAD])
    nvml = NvmlCollector(query, clock=Clock(), process_every=10)
    for _ in range(20):
        nvml.collect()
    assert query.calls["handle"] == 2
    assert query.calls["field_values"] == 40
    assert query.calls["processes"] == 4  # ticks 0 and 10, for each GPU
    assert query.calls["init"] == 1


def test_a_mig_gpu_reports_what_it_has_and_never_a_utilisation() -> None:
    query = RecordedNvml([H100_MIG])
    nvml = NvmlCollector(query, clock=Clock(), pids=lambda: {21198})
    samples = by_name(nvml.collect() + nvml.collect())
    names = {name for _, name in samples}
    assert "gpu.utilization" not in names and "gpu.memory_utilization" not in names
    assert "gpu.sm_active" not in names  # no GPM there either
    assert "gpu.energy" not in names  # no energy counter on this one
    assert samples[("gpu:0", "gpu.memory_used")] == 11125 * MIB
    assert samples[("gpu:0", "gpu.power")] == pytest.approx(438.0)
    assert query.calls["utilization"] == 1  # unsupported once, not asked again
    assert nvml.devices()[0]["mig"] is True


def test_devices_and_facts_describe_each_gpu() -> None:
    nvml = NvmlCollector(RecordedNvml([H100_LOAD]), clock=Clock())
    (device,) = nvml.devices()
    assert device == {
        "key": "gpu:0",
        "kind": "gpu",
        "index": 0,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 81559 * MIB,
        "power_limit": 700.0,
        "mig": False,
    }
    assert nvml.facts() == {
        "nvml.available": True,
        "nvml.driver_version": "590.48.01",
        "gpu.count": 1,
    }


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_without_nvml_it_says_so_once_and_collects_nothing() -> None:
    def broken(op: str, *args: object) -> object:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    agent_log._said.discard("no-nvml")
    recorder = Recorder()
    agent_log.log.addHandler(recorder)
    try:
        for _ in range(2):  # even a second collector in the process stays quiet
            nvml = NvmlCollector(broken, clock=Clock())
            assert nvml.collect() == [] and nvml.collect() == []
            assert nvml.devices() == []
    finally:
        agent_log.log.removeHandler(recorder)
    lines = [m for m in recorder.messages if "NVML" in m]
    assert len(lines) == 1 and "libnvidia-ml" in lines[0]
    assert nvml.facts() == {"nvml.available": False}


def test_the_real_query_maps_onto_the_installed_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    from perfweb_agent.collectors.nvml_real import GPM_METRICS, make_query

    for _, constant in GPM_METRICS:
        assert hasattr(pynvml, constant)
    assert hasattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption")
    query = make_query(pynvml)
    with pytest.raises(KeyError):
        query("no_such_op")


@pytest.mark.parametrize(("local_rank", "expects_gpus"), [(None, True), ("0", True), ("1", False)])
def test_only_local_rank_zero_samples_the_hosts_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path, local_rank: str | None, expects_gpus: bool
) -> None:
    from perfweb_agent.core.config import load_settings
    from perfweb_agent.runtime.agent import Agent

    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    settings = load_settings(env={}, offline=str(tmp_path))
    agent = Agent(settings, nvml_query=RecordedNvml([H100_LOAD]))
    agent._tick()
    metrics, _ = agent.batches.samples.drain()
    gpu_series = [m for m in metrics if m["device"] == "gpu:0"]
    assert bool(gpu_series) is expects_gpus
    assert bool(agent.batches.devices) is expects_gpus
    assert any(m["device"] == "process" for m in metrics)


def test_field_values_are_decoded_from_pynvml_structs() -> None:
    pynvml = pytest.importorskip("pynvml")
    from perfweb_agent.collectors.nvml_real import _field_value

    entry = pynvml.c_nvmlFieldValue_t()
    entry.nvmlReturn = pynvml.NVML_SUCCESS
    entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    entry.value.ullVal = 7_000_000_000
    assert _field_value(pynvml, entry) == 7e9
    entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    entry.value.uiVal = 625_680
    assert _field_value(pynvml, entry) == 625_680.0
    entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _field_value(pynvml, entry) is None
