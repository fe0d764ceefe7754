"""End to end: `perf-agent attach --server` runs the input-bound example against the real
server (runserver), a Celery worker and beat over the local Redis; once the run has ended,
its top stored finding is `dataloader.num_workers`, and the agent's profiler window arrived
through the trace endpoint and was analysed."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import pytest

from tests.jobs import stack as stack_module
from tests.server.servers import require_redis

REDIS_DB = 11  # alerts use 12, jobs 13, the server tests 14


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[stack_module.Stack]:
    require_redis()
    monkeypatch.setattr(stack_module, "REDIS_DB", REDIS_DB)
    running = stack_module.Stack()
    running.env.update(PERFWEB_DIAGNOSE_SWEEP_INTERVAL="1", PERFWEB_DIAGNOSE_INTERVAL="5")
    try:
        running.start()
        running.spawn(
            "beat",
            [sys.executable, "-m", "celery", "-A", "perfweb", "beat", "--loglevel", "WARNING"],
        )
        yield running
    finally:
        running.stop()


def diagnosed_after_end(stack: stack_module.Stack, run_id: str) -> bool:
    rows = stack.query(
        "SELECT r.status, r.last_seen_at, d.data_seen_at FROM runs_run r"
        " JOIN diagnostics_rundiagnosis d ON d.run_id = r.id WHERE r.run_id = ?",
        run_id,
    )
    return bool(rows) and rows[0][0] == "finished" and (rows[0][2] or "") >= rows[0][1]


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_input_bound_example_is_diagnosed_after_it_ends(stack: stack_module.Stack) -> None:
    run_id = stack.attach(sys.executable, "examples/bottleneck_dataloader.py", "--steps", "40")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not diagnosed_after_end(stack, run_id):
        time.sleep(1)
    assert diagnosed_after_end(stack, run_id), stack.logs()
    findings = stack.query(
        "SELECT f.rule_id, f.estimated_gain, f.fix FROM diagnostics_finding f"
        " JOIN runs_run r ON r.id = f.run_id WHERE r.run_id = ? ORDER BY f.rank",
        run_id,
    )
    assert findings, stack.logs()
    rule_id, gain, fix = findings[0]
    assert rule_id == "dataloader.num_workers", findings
    assert gain >= 0.3 and json.loads(fix)["knob"].startswith("num_workers=")
    traces = stack.query(
        "SELECT t.name, t.analysis_error, t.summary IS NOT NULL FROM diagnostics_trace t"
        " JOIN runs_run r ON r.id = t.run_id WHERE r.run_id = ?",
        run_id,
    )
    assert traces and all(analysed and not error for _, error, analysed in traces), traces
    with stack.browser.open(f"{stack.url}/api/v1/runs/{run_id}/findings") as reply:
        body = json.loads(reply.read())
    assert body["findings"][0]["id"] == "dataloader.num_workers"
