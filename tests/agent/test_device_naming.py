"""No two processes of one run may share a series: ranks and hosts are in the device names."""

from __future__ import annotations

import pytest

from perfweb_agent.collectors.nvml import NvmlCollector
from perfweb_agent.collectors.process import ProcessCollector
from perfweb_contract.protocol import DeviceNaming
from tests.agent.nvml_fixtures import H100_LOAD, RecordedNvml
from tests.agent.test_collectors_and_settings import FakeSource


@pytest.mark.parametrize(
    ("env", "process", "workers", "gpu"),
    [
        ({}, "process", "workers", "gpu:0"),
        ({"RANK": "0", "WORLD_SIZE": "1"}, "process", "workers", "gpu:0"),
        (  # one host, four ranks
            {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"},
            "process:3",
            "workers:3",
            "gpu:0",
        ),
        (  # two hosts of eight ranks: the second host's GPUs carry its node number
            {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"},
            "process:9",
            "workers:9",
            "gpu:0:n1",
        ),
        (  # no GROUP_RANK: the node follows from the rank
            {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"},
            "process:5",
            "workers:5",
            "gpu:0:n1",
        ),
    ],
)
def test_it_names_devices_from_the_launch_environment(
    env: dict[str, str], process: str, workers: str, gpu: str
) -> None:
    naming = DeviceNaming.from_env(env)
    assert (naming.process(), naming.workers(), naming.gpu(0)) == (process, workers, gpu)


def test_two_ranks_on_one_host_report_distinct_process_series() -> None:
    names = set()
    for rank in ("0", "1"):
        naming = DeviceNaming.from_env({"RANK": rank, "WORLD_SIZE": "2"})
        samples = ProcessCollector(FakeSource(), clock=lambda: 1.0, naming=naming).collect()
        names |= {(device, name) for device, name, _, _ in samples}
    assert ("process:0", "process.rss") in names and ("process:1", "process.rss") in names
    assert ("workers:1", "process.count") in names
    assert not any(device in ("process", "workers") for device, _ in names)


def test_gpus_of_a_second_host_carry_its_node() -> None:
    naming = DeviceNaming.from_env({"RANK": "8", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    nvml = NvmlCollector(RecordedNvml([H100_LOAD]), clock=lambda: 1.0, naming=naming)
    assert nvml.is_available()
    devices = {device for device, _, _, _ in nvml.collect()}
    assert devices and all(device.endswith(":n1") for device in devices)
    assert all(len(device) <= 32 for device in devices)
