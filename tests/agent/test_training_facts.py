"""The training-thread facts: read on the thread that runs the steps, never the agent's."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from perfweb_agent.core.buffer import FactBuffer
from perfweb_agent.runtime.training_facts import CHECK_STEPS, TrainingThreadFacts


class PerThreadCuda:
    """CUDA's current device is per host thread: a new thread starts on device 0."""

    def __init__(self) -> None:
        self._local = threading.local()

    def is_initialized(self) -> bool:
        return True

    def set_device(self, index: int) -> None:
        self._local.device = index

    def current_device(self) -> int:
        return getattr(self._local, "device", 0)


def _facts_after_steps(cuda: PerThreadCuda, device: int) -> dict[str, Any]:
    facts = FactBuffer()
    training = TrainingThreadFacts(facts)
    training._torch = SimpleNamespace(cuda=cuda)  # the post-hook reads torch.cuda only

    def train() -> None:  # the script's thread: set_device(local_rank), then steps
        cuda.set_device(device)
        for _ in range(CHECK_STEPS):
            training._after_step(None, (), {})

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    return facts.snapshot()


def test_it_reads_the_device_the_training_thread_set() -> None:
    cuda = PerThreadCuda()
    facts = _facts_after_steps(cuda, device=3)
    assert facts["cuda.training_device"] == 3
    assert cuda.current_device() == 0  # what any other thread (the agent's) would have read
