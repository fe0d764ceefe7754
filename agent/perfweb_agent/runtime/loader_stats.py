"""What the DataLoader hooks (perfweb_agent.runtime.torch_patches) count, per loader."""

from __future__ import annotations

from typing import Any


class LoaderStats:
    """Per DataLoader (by index, in the order their first iterator was made): the loop's time
    blocked in it, its batches, the optimizer steps it fed (steps in which it handed out a
    batch: the training loader feeds every one, an evaluation loader few) and its epoch
    starts (a new iterator over a loader whose last one ran out). Plain ints and floats
    updated on the training thread; the agent thread only reads them."""

    def __init__(self) -> None:
        self.wait_s: dict[int, float] = {}
        self.batches: dict[int, int] = {}
        self.fed_steps: dict[int, int] = {}
        self.epoch_starts: dict[int, int] = {}
        self.exhausted: set[int] = set()
        self.fetched: set[int] = set()  # loaders that handed out a batch since the last step

    def fetched_batch(self, index: int, seconds: float) -> None:
        self.wait_s[index] = self.wait_s.get(index, 0.0) + seconds
        self.batches[index] = self.batches.get(index, 0) + 1
        self.fetched.add(index)

    def ran_out(self, index: int) -> None:
        self.exhausted.add(index)

    def new_iterator(self, index: int) -> None:
        if index in self.exhausted:  # the sampler was used up: a real epoch boundary
            self.exhausted.discard(index)
            self.epoch_starts[index] = self.epoch_starts.get(index, 0) + 1

    def optimizer_stepped(self) -> None:
        fetched = self.fetched
        for index in fetched:
            self.fed_steps[index] = self.fed_steps.get(index, 0) + 1
        fetched.clear()

    def facts(self) -> dict[str, Any]:
        """`dataloader.N.wait_s`, `.batches`, `.fed_steps`, `.epoch_starts` of every loader seen."""
        facts: dict[str, Any] = {}
        for index in sorted(self.batches):
            prefix = f"dataloader.{index}."
            facts[prefix + "wait_s"] = round(self.wait_s.get(index, 0.0), 4)
            facts[prefix + "batches"] = self.batches.get(index, 0)
            facts[prefix + "fed_steps"] = self.fed_steps.get(index, 0)
            facts[prefix + "epoch_starts"] = self.epoch_starts.get(index, 0)
        return facts
