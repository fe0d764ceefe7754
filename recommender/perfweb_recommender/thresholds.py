"""The thresholds and label tables that the rules and perfweb's alert conditions share.

One engine per concept: an alert that says "holding memory" or "SW thermal slowdown" means
exactly what the finding with the same words means, because both read these names.
"""

from __future__ import annotations

GIB = 1 << 30
# A GPU "holds memory" when at least this much of it is in use (rule gpu.idle_memory_held,
# the idle-memory alert, the fleet page's idle-holding-memory hours).
HELD_MEMORY_BYTES = 1 * GIB
# GPU busy % below which time counts as underused (rule gpu.low_utilization, the default
# low-utilisation alert, the fleet page's low-utilisation hours).
LOW_UTILIZATION_PCT = 30.0
# Share of step time blocked on the DataLoader iterator from which a loop is input bound
# (rule dataloader.num_workers, the alert's derived why).
DATA_WAIT_SHARE_MIN = 0.10
# NVML clocks-event reasons that mean the GPU slowed itself down (not idle, not app clocks).
THROTTLE_REASONS = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}
THROTTLE_MASK = sum(THROTTLE_REASONS)
