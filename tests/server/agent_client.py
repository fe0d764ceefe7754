"""An agent speaking the wire protocol to Django's test client, and sample bodies."""

from __future__ import annotations

import gzip
import json
from typing import Any

from django.test import Client
from django.test.client import ClientHandler

from perfweb.handlers import DirectViews

T0 = 1764496800.0  # 2025-11-30 10:00 UTC
RUN_ID = "6f1c0c1e8a2b4d6f9e0a1b2c3d4e5f60"
AGENT_ID = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"


class _DirectClientHandler(DirectViews, ClientHandler):
    """The test client's handler, with perfweb.wsgi's direct calls of the agents' timed
    endpoints."""


def direct_client() -> Client:
    """A test client that handles requests as perfweb.wsgi.application does."""
    client = Client()
    client.handler = _DirectClientHandler(enforce_csrf_checks=False)
    return client


class Agent:
    """Posts protocol bodies with a token, like agent/ does, handled as perfweb.wsgi would."""

    def __init__(self, token: str, *, run_id: str = RUN_ID, agent_id: str = AGENT_ID) -> None:
        self.client = direct_client()
        self.token = token
        self.run_id = run_id
        self.agent_id = agent_id
        self.seq = 0

    def post(self, path: str, body: Any, *, gzipped: bool = False, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else json.dumps(body).encode()
        headers: dict[str, str] = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}
        if gzipped:
            data = gzip.compress(data)
            headers["HTTP_CONTENT_ENCODING"] = "gzip"
        return self.client.post(
            f"/api/v1/ingest/{path}", data=data, content_type="application/json", **headers
        )

    def start(self, **fields: Any) -> Any:
        return self.post("start", start_body(run_id=self.run_id, agent_id=self.agent_id, **fields))

    def batch(self, *, seq: int | None = None, gzipped: bool = False, **fields: Any) -> Any:
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        body = batch_body(run_id=self.run_id, agent_id=self.agent_id, seq=seq, **fields)
        return self.post("batch", body, gzipped=gzipped)

    def heartbeat(self) -> Any:
        return self.post(
            "heartbeat", {"run_id": self.run_id, "agent_id": self.agent_id, "sent_at": T0}
        )

    def finish(self, *, exit_code: int | None = 0, final: bool = True) -> Any:
        body = {
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "ended_at": T0 + 3600,
            "exit_code": exit_code,
            "final": final,
        }
        return self.post("finish", body)


def start_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run_id": RUN_ID,
        "agent_id": AGENT_ID,
        "name": "resnet50-bs256",
        "role": "launcher",
        "command": ["python", "train.py", "--epochs", "3"],
        "cwd": "/home/me/project",
        "host": "gpu-node-07",
        "pid": 41233,
        "rank": 0,
        "local_rank": 0,
        "world_size": 1,
        "started_at": T0,
        "tags": {"team": "vision"},
        "facts": {"torch.version": "2.13.0"},
        "devices": [
            {
                "key": "gpu:0",
                "kind": "gpu",
                "index": 0,
                "uuid": "GPU-5d1c",
                "name": "H100",
                "memory_total": 85520809984,
                "power_limit": 700.0,
            },
        ],
    }
    body.update(fields)
    return body


def batch_body(*, seq: int = 0, start: float = T0, n: int = 10, **fields: Any) -> dict[str, Any]:
    times = [start + i for i in range(n)]
    body: dict[str, Any] = {
        "run_id": RUN_ID,
        "agent_id": AGENT_ID,
        "seq": seq,
        "sent_at": start + n,
        "metrics": [
            {
                "device": "gpu:0",
                "name": "gpu.utilization",
                "t": times,
                "v": [float(50 + i % 50) for i in range(n)],
            },
            {
                "device": "process",
                "name": "process.rss",
                "t": times,
                "v": [1.2e9 + i for i in range(n)],
            },
        ],
        "steps": {
            "rank": 0,
            "index": list(range(seq * 2, seq * 2 + 2)),
            "t": [start + 0.5, start + 1.5],
            "duration": [0.51, 0.49],
            "data_wait": [0.30, 0.29],
        },
        "facts": {"dataloader.0.num_workers": 0},
        "devices": [],
        "dropped": 0,
    }
    body.update(fields)
    return body
