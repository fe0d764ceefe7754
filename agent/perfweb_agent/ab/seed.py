"""The same random inputs in both arms of an A/B round: seeds set before the script draws any.

Installed only when `PERF_AGENT_AB_SEED` is set (the A/B engine sets it, the same value in
both arms). Python's `random` is seeded at once, torch's and numpy's global generators the
moment the script imports them, before its first line that uses them. A script that seeds
itself keeps its own seeds (its call comes later and wins). Without this, a script that draws
its requests from an unseeded generator would feed the two arms different inputs, and their
outputs could not be compared. Seeding torch does not initialise CUDA (torch queues the CUDA
seed until CUDA starts).
"""

from __future__ import annotations

import contextlib
import os
import random
from types import ModuleType

from perfweb_agent.core.importhook import when_imported

ENV_SEED = "PERF_AGENT_AB_SEED"


def install_from_env() -> int | None:
    """Seed the global generators if `PERF_AGENT_AB_SEED` holds a whole number; the seed."""
    raw = os.environ.get(ENV_SEED, "").strip()
    if not raw.isascii() or not raw.isdigit():
        return None
    seed = int(raw)
    random.seed(seed)
    when_imported("torch", lambda torch: _seed_torch(torch, seed))
    when_imported("numpy", lambda numpy: _seed_numpy(numpy, seed))
    return seed


def _seed_torch(torch: ModuleType, seed: int) -> None:
    with contextlib.suppress(Exception):  # never raise into the user's import
        torch.manual_seed(seed)


def _seed_numpy(numpy: ModuleType, seed: int) -> None:
    with contextlib.suppress(Exception):
        numpy.random.seed(seed % 2**32)
