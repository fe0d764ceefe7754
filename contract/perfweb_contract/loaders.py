"""Which DataLoader is the training loop's: the one a DataLoader knob is addressed to.

The agent numbers a process's DataLoaders in the order their first iterator is made
(`dataloader.N.*` facts) and counts, for each, the optimizer steps it handed batches to
(`dataloader.N.fed_steps`): the training loader feeds every step, an evaluation loader only
the steps it ran in. The recommender judges that loader's wait, and an A/B job's DataLoader
knobs (`num_workers`, `pin_memory`, `persistent_workers`) change that loader alone
(agent/perfweb_agent/ab/knobs_torch.py); both ask `training_loader_index`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# The loader (its N) an A/B candidate's DataLoader knobs apply to, set by the A/B engine
# from its baseline arm; unset, they apply to every DataLoader the script makes.
ENV_KNOB_LOADER = "PERF_AGENT_KNOB_LOADER"
FACT_KNOB_LOADER = "ab.knob_loader"  # the run's fact: which loader the knobs changed
LOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers")

_FED = re.compile(r"dataloader\.([0-9]+)\.fed_steps")


def training_loader_index(fed_steps: Sequence[int]) -> int | None:
    """The index of the loader that fed the most optimizer steps (the earliest of a tie),
    else the first one; None without loaders."""
    if not fed_steps:
        return None
    if not any(fed_steps):
        return 0
    return max(range(len(fed_steps)), key=lambda i: (fed_steps[i], -i))


def training_loader_from_facts(facts: Mapping[str, Any]) -> int | None:
    """`training_loader_index` over a run's `dataloader.N.fed_steps` facts (None when the
    run recorded none: no DataLoader, or an agent that did not count them)."""
    fed: dict[int, int] = {}
    for key, value in facts.items():
        match = _FED.fullmatch(key)
        if match and isinstance(value, int) and not isinstance(value, bool):
            fed[int(match.group(1))] = value
    if not fed:
        return None
    return training_loader_index([fed.get(i, 0) for i in range(max(fed) + 1)])
