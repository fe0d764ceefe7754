"""A streamed run for the dashboard tests.

The personas and tokens come from tests/conftest.py: owner and teammate are members of
"vision" (`token`), outsider only of "speech" (`other_token`). Runs are created through the
public ingest API with the project's token, exactly as an agent would, so these tests do not
depend on how runs are stored.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD


def post_json(client: Client, path: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    return response.json()


def stream_run(
    token: str,
    *,
    run_id: str,
    name: str,
    host: str = "trainer-01",
    gpus: int = 0,
    seconds: int = 30,
    finish_with: int | None = None,
    facts: dict[str, Any] | None = None,
    steps: bool = True,
) -> None:
    """Starts a run and sends `seconds` of 1 Hz samples (process, workers, steps, GPUs);
    `facts` go with the batch, `steps=False` leaves the steps out."""
    client = Client()
    t0 = time.time() - seconds - 5
    devices = [
        {
            "key": f"gpu:{i}",
            "kind": "gpu",
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "memory_total": 85520809984,
            "power_limit": 700.0,
        }
        for i in range(gpus)
    ]
    post_json(
        client,
        "/api/v1/ingest/start",
        token,
        {
            "run_id": run_id,
            "agent_id": f"{run_id}-agent",
            "name": name,
            "role": "launcher",
            "command": ["python", "train.py", "--epochs", "3"],
            "cwd": "/home/me",
            "host": host,
            "pid": 4242,
            "rank": None,
            "local_rank": None,
            "world_size": None,
            "started_at": t0,
            "tags": {"team": "vision"},
            "facts": {"torch.version": "2.13.0", "cuda.available": gpus > 0},
            "devices": devices,
        },
    )
    ts = [t0 + i for i in range(seconds)]
    metrics = [
        {
            "device": "process",
            "name": "process.cpu_percent",
            "t": ts,
            "v": [95.0 + i % 5 for i in range(seconds)],
        },
        {
            "device": "process",
            "name": "process.rss",
            "t": ts,
            "v": [1.2e9 + i * 1e6 for i in range(seconds)],
        },
        {"device": "workers", "name": "process.cpu_percent", "t": ts, "v": [40.0] * seconds},
        {"device": "workers", "name": "process.rss", "t": ts, "v": [3.0e8] * seconds},
    ]
    for gpu in range(gpus):
        metrics += [
            {
                "device": f"gpu:{gpu}",
                "name": "gpu.utilization",
                "t": ts,
                "v": [80.0 + gpu] * seconds,
            },
            {"device": f"gpu:{gpu}", "name": "gpu.memory_used", "t": ts, "v": [4.0e10] * seconds},
            {"device": f"gpu:{gpu}", "name": "gpu.power", "t": ts, "v": [450.0] * seconds},
            {"device": f"gpu:{gpu}", "name": "gpu.temperature", "t": ts, "v": [61.0] * seconds},
        ]
    post_json(
        client,
        "/api/v1/ingest/batch",
        token,
        {
            "run_id": run_id,
            "agent_id": f"{run_id}-agent",
            "seq": 0,
            "sent_at": ts[-1],
            "metrics": metrics,
            **(
                {
                    "steps": {
                        "rank": 0,
                        "index": list(range(seconds)),
                        "t": ts,
                        "duration": [0.5] * seconds,
                        "data_wait": [0.2] * seconds,
                    }
                }
                if steps
                else {}
            ),
            "facts": {"dataloader.0.num_workers": 2, **(facts or {})},
            "devices": [],
            "dropped": 0,
        },
    )
    if finish_with is not None:
        post_json(
            client,
            "/api/v1/ingest/finish",
            token,
            {
                "run_id": run_id,
                "agent_id": f"{run_id}-agent",
                "ended_at": ts[-1] + 1,
                "exit_code": finish_with,
                "final": True,
            },
        )


@pytest.fixture
def vision_run(token: str) -> str:
    stream_run(token, run_id="vision-run-0001", name="resnet50-bs256", gpus=2)
    return "vision-run-0001"


@pytest.fixture
def speech_run(other_token: str) -> str:
    stream_run(
        other_token, run_id="speech-run-0001", name="whisper-tiny", host="asr-07", finish_with=0
    )
    return "speech-run-0001"


def login(client: Client, user: Any) -> Client:
    assert client.login(username=user.username, password=PASSWORD)
    return client
