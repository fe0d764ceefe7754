"""The host collector reads every process's CPU and the host's memory from a (fake) /proc."""

from __future__ import annotations

from pathlib import Path

from perfweb_agent.collectors.host import HostCollector, ProcHostSource

MEMINFO = "MemTotal:       16000000 kB\nMemFree:  1000 kB\nMemAvailable:    4000000 kB\n"


def _proc(root: Path, busy: int, idle: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 7 7\ncpu0 1 2 3 4\n")
    (root / "meminfo").write_text(MEMINFO)


def test_it_reports_the_share_of_all_cores_busy_between_two_ticks_and_memory_used(
    tmp_path: Path,
) -> None:
    collector = HostCollector(ProcHostSource(str(tmp_path)), clock=lambda: 5.0)
    _proc(tmp_path, busy=1000, idle=3000)
    first = collector.collect()
    assert [name for _, name, _, _ in first] == ["host.memory_used", "host.memory_total"]
    _proc(tmp_path, busy=1300, idle=3100)  # 300 of 400 jiffies busy: 75 %
    samples = {name: (device, v) for device, name, _, v in collector.collect()}
    assert samples["host.cpu_percent"] == ("host", 75.0)
    assert samples["host.memory_used"] == ("host", 12_000_000 * 1024.0)
    assert samples["host.memory_total"] == ("host", 16_000_000 * 1024.0)


def test_a_host_without_the_files_reports_nothing_and_does_not_raise(tmp_path: Path) -> None:
    collector = HostCollector(ProcHostSource(str(tmp_path / "missing")))
    assert collector.collect() == []
