"""CPU core lists as `taskset -c` and /proc write them ("0-3,8"): the agent reports the cores
a process may run on (fact `host.affinity`) and the recommender names them in its fixes."""

from __future__ import annotations

from collections.abc import Iterable


def format_cpu_list(cores: Iterable[int]) -> str:
    """ "0-3,8" for {0, 1, 2, 3, 8}; "" for none."""
    ranges: list[list[int]] = []
    for core in sorted(set(cores)):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def parse_cpu_list(text: str) -> list[int]:
    """The cores of "0-3,8" in order; [] for text that is not a core list."""
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return []
        cores += range(int(first), int(last or first) + 1)
    return sorted(set(cores))
