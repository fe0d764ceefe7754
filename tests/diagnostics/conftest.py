"""Fixtures of the diagnostics tests: traces kept under tmp_path, an agent of `project`,
agent-shaped runs (input bound, healthy) and the agent's own chunking of a trace upload.

Personas come from tests/conftest.py: owner and teammate are members of "vision" (`token`),
outsider only of "speech" (`other_token`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from perfweb_agent.delivery.traces import chunk_bodies
from tests.recommender.conftest import peer_traces_dir
from tests.server.agent_client import AGENT_ID, RUN_ID, T0, Agent

PEER = peer_traces_dir()  # ../shared/peer-traces (or $PERFWEB_PEER_TRACES)
NS_TRACE = (
    (PEER or Path("/nonexistent"))
    / "hta"
    / "ns_resolution_trace"
    / ("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
)


@pytest.fixture(autouse=True)
def trace_dir(settings: Any, tmp_path: Path) -> Path:
    settings.PERFWEB_TRACE_DIR = str(tmp_path / "traces")
    return tmp_path / "traces"


@pytest.fixture
def agent(token: str) -> Agent:
    return Agent(token)


@pytest.fixture
def started(agent: Agent) -> Agent:
    assert agent.start().status_code == 200
    return agent


def stream_steps(
    agent: Agent, *, steps: int = 60, step_s: float = 0.1, wait_share: float = 0.6,
    start: float = T0, per_batch: int = 20, facts: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Batches as the agent sends them: steps with their DataLoader wait, process samples."""
    for first in range(0, steps, per_batch):
        index = list(range(first, min(steps, first + per_batch)))
        ends = [start + (i + 1) * step_s for i in index]
        body = {
            "metrics": [
                {
                    "device": "process",
                    "name": "process.cpu_percent",
                    "t": ends,
                    "v": [98.0] * len(ends),
                },
                {"device": "process", "name": "process.rss", "t": ends, "v": [4e8] * len(ends)},
            ],
            "steps": {
                "rank": 0,
                "index": index,
                "t": ends,
                "duration": [step_s] * len(index),
                "data_wait": [step_s * wait_share] * len(index),
            },
            "facts": facts
            if facts is not None
            else {
                "dataloader.0.num_workers": 0,
                "dataloader.0.batch_size": 16,
                "host.cpu_count": 8,
                "torch.num_threads": 1,
            },
        }
        response = agent.batch(**body)
        assert response.status_code == 200, response.content


def input_bound_run(agent: Agent, **kwargs: Any) -> Agent:
    """A started run whose loop waits on the DataLoader for 60 % of every step."""
    assert agent.start().status_code == 200
    stream_steps(agent, **kwargs)
    return agent


def trace_bytes(events: list[dict[str, Any]] | None = None) -> bytes:
    """A small gzip Kineto trace: two profiler steps, mostly DataLoader."""
    events = events or [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "ts": 0,
            "dur": 1000,
            "pid": 1,
            "tid": 1,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "ts": 10,
            "dur": 700,
            "pid": 1,
            "tid": 1,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#2",
            "ts": 1000,
            "dur": 1000,
            "pid": 1,
            "tid": 1,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "ts": 1010,
            "dur": 700,
            "pid": 1,
            "tid": 1,
        },
    ]
    return gzip.compress(json.dumps({"traceEvents": events}).encode())


def upload(
    agent: Agent, data: bytes, *, name: str = "rank0-step20-25", chunk_bytes: int = 1 << 22,
    order: list[int] | None = None,
) -> list[Any]:  # fmt: skip
    """The agent's own chunk bodies for `data`, posted in `order` (default: in order)."""
    bodies = chunk_bodies(agent.run_id, agent.agent_id, name, data, chunk_bytes=chunk_bytes)
    order = list(range(len(bodies))) if order is None else order
    return [agent.post("trace", bodies[i]) for i in order]


__all__ = [
    "AGENT_ID",
    "RUN_ID",
    "T0",
    "Agent",
    "NS_TRACE",
    "input_bound_run",
    "stream_steps",
    "trace_bytes",
    "upload",
]
