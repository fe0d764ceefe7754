"""An agent stand-in: starts a run through the real ingest API and posts a batch of GPU
utilisation samples every `period_s`, at whatever `utilization` is set to right now."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any


class RunStreamer(threading.Thread):
    def __init__(
        self,
        *,
        stack: Any,
        token: str,
        name: str,
        utilization: float,
        period_s: float = 0.5,
        gpus: int = 1,
    ) -> None:
        super().__init__(daemon=True)
        self.stack, self.token, self.name = stack, token, name
        self.run_id = f"alerts-{uuid.uuid4().hex}"
        self.agent_id = uuid.uuid4().hex
        self.utilization = utilization
        self.period_s, self.gpus = period_s, gpus
        self.seq = 0
        self._halt = threading.Event()
        self.errors: list[str] = []

    def begin(self) -> RunStreamer:
        self.stack.post(
            "/api/v1/ingest/start",
            self.token,
            {
                "run_id": self.run_id,
                "agent_id": self.agent_id,
                "name": self.name,
                "role": "launcher",
                "command": ["python", "train.py"],
                "cwd": "/tmp",
                "host": "trainer-01",
                "pid": 4242,
                "rank": None,
                "local_rank": None,
                "world_size": None,
                "started_at": time.time(),
                "tags": {"team": "vision"},
                "facts": {},
                "devices": [
                    {"key": f"gpu:{i}", "kind": "gpu", "index": i, "name": "NVIDIA H100 80GB HBM3"}
                    for i in range(self.gpus)
                ],
            },
        )
        self.start()
        return self

    def run(self) -> None:
        while not self._halt.wait(self.period_s):
            try:
                self.post_batch()
            except Exception as error:  # keep streaming; the test reads `errors`
                self.errors.append(repr(error))

    def post_batch(self, *, at: float | None = None) -> None:
        now = time.time() if at is None else at
        metrics = [
            {"device": f"gpu:{i}", "name": "gpu.utilization", "t": [now], "v": [self.utilization]}
            for i in range(self.gpus)
        ]
        self.stack.post(
            "/api/v1/ingest/batch",
            self.token,
            {
                "run_id": self.run_id,
                "agent_id": self.agent_id,
                "seq": self.seq,
                "sent_at": now,
                "metrics": metrics,
                "dropped": 0,
            },
        )
        self.seq += 1

    def finish(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self.stack.post(
            "/api/v1/ingest/finish",
            self.token,
            {
                "run_id": self.run_id,
                "agent_id": self.agent_id,
                "ended_at": time.time(),
                "exit_code": 0,
                "final": True,
            },
        )
