"""The workloads set torch's global precision flags as their plants need (and one intra-op
thread on a CPU): restore them after each test, so no other test in this process sees a
changed default."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_flags() -> Iterator[None]:
    saved = (
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
        torch.get_num_threads(),
    )
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved[1], saved[2]
    torch.set_num_threads(saved[3])
