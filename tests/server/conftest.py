"""Fixtures of the server tests: an agent with the project's token, and a started run."""

from __future__ import annotations

import pytest

from .agent_client import Agent


@pytest.fixture
def agent(token: str) -> Agent:
    return Agent(token)


@pytest.fixture
def started(agent: Agent) -> Agent:
    """An agent whose run has started."""
    assert agent.start().status_code == 200
    return agent
