"""Ingest under concurrency: the ranks of one run posting at once, each batch sent twice.

Every request is answered 200, every batch is stored exactly once, and the counters add up.
On PostgreSQL (through test_postgresql.py) the requests run on separate connections at the
same time, so this is where the order in which a batch locks the run, its receipt and its
process would deadlock if it were wrong. The SQLite database of the tests lives in memory,
where a second writer fails at once instead of waiting (a file database waits: see
perfweb/env.py), so there the requests take turns and only the counting is checked.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from perfweb.runs.models import BatchReceipt, Run, RunProcess

from .agent_client import T0, Agent
from .test_ingest import stored_counts

pytestmark = pytest.mark.django_db(transaction=True)

RANKS = 4
BATCHES = 12


def rank_agent(token: str, rank: int) -> Agent:
    return Agent(token, agent_id=f"{rank:032x}")


def turns() -> contextlib.AbstractContextManager[object]:
    """Around each request: nothing on PostgreSQL, one at a time on the in-memory SQLite."""
    return contextlib.nullcontext() if connection.vendor == "postgresql" else TURNS


TURNS = threading.Lock()


def post_rank(token: str, rank: int) -> list[int]:
    """Starts rank `rank`, posts its batches twice each (a retry racing the others), beats
    its heart between them; the status codes."""
    agent = rank_agent(token, rank)
    try:
        with turns():
            statuses = [agent.start(role="worker", rank=rank).status_code]
        for seq in range(BATCHES):
            steps = {
                "rank": rank,
                "index": [seq],
                "t": [T0 + seq],
                "duration": [0.5],
                "data_wait": [0.1],
            }
            facts = {f"rank{rank}.batches": seq + 1}  # merged into the run's under its lock
            for _ in range(2):
                with turns():
                    batch = agent.batch(seq=seq, start=T0 + 10 * seq, steps=steps, facts=facts)
                statuses.append(batch.status_code)
            with turns():
                statuses.append(agent.heartbeat().status_code)
        return statuses
    finally:
        connection.close()  # this thread's connection


def test_ranks_of_one_run_post_at_once_and_every_batch_is_stored_once(token: str) -> None:
    with ThreadPoolExecutor(RANKS) as pool:
        answers = list(pool.map(lambda rank: post_rank(token, rank), range(RANKS)))
    assert {status for statuses in answers for status in statuses} == {200}
    run = Run.objects.get()
    rank_facts = [f"rank{rank}.batches" for rank in range(RANKS)]
    assert BatchReceipt.objects.count() == RANKS * BATCHES
    # Each batch holds 10 samples of each metric; every rank writes the same two series.
    assert stored_counts(run)[("gpu:0", "gpu.utilization")] == RANKS * BATCHES * 10
    assert stored_counts(run)[("rank:0", "step.duration")] == BATCHES  # rank 0's steps
    assert set(RunProcess.objects.values_list("step_count", flat=True)) == {BATCHES}
    assert run.step_count == BATCHES
    assert {key: run.facts.get(key) for key in rank_facts} == dict.fromkeys(rank_facts, BATCHES)
    finishing = [rank_agent(token, rank).finish(final=rank == 0) for rank in range(RANKS)]
    assert [response.status_code for response in finishing] == [200] * RANKS
    assert Run.objects.get().status == "finished"
