"""Fixtures of the server tests: an agent with the project's token, and a started run."""

from __future__ import annotations

import os

import pytest

from .agent_client import Agent

# Tests of PostgreSQL's own behaviour, run by test_postgresql.py with DATABASE_URL on it.
if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
    collect_ignore = ["test_on_postgresql.py"]


@pytest.fixture
def agent(token: str) -> Agent:
    return Agent(token)


@pytest.fixture
def started(agent: Agent) -> Agent:
    """An agent whose run has started."""
    assert agent.start().status_code == 200
    return agent
