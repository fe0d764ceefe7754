"""Resident-set helpers shared by the benchmark probes (Linux)."""

from __future__ import annotations

import resource


def current_rss_mib() -> float:
    """The process's current resident set (MiB), from /proc/self/statm."""
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    """Peak resident set (MiB) of this process or of its largest waited-for child."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024  # ru_maxrss is KiB on Linux
