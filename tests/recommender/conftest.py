"""Shared fixtures for the recommender tests: where the peer traces and HTA's results live."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]


def peer_traces_dir() -> Path | None:
    """../shared/peer-traces next to the checkout (or $PERFWEB_PEER_TRACES)."""
    candidates = [os.environ.get("PERFWEB_PEER_TRACES", "")]
    candidates += [
        str(_REPO.parent / "shared" / "peer-traces"),
        str(_REPO / "shared" / "peer-traces"),
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "hta").is_dir():
            return Path(candidate)
    return None


PEER = peer_traces_dir()
needs_peer_traces = pytest.mark.skipif(PEER is None, reason="shared/peer-traces not available")


def hta_runs() -> list[dict]:
    """HTA 0.5.0's recorded results, one entry per trace directory."""
    if PEER is None:
        return []
    runs: list[dict] = []
    for name in ("trace_filter.json", "other_traces.json"):
        runs += json.loads((PEER / "hta-0.5.0-results" / name).read_text())["runs"]
    return runs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `hta_run` with every trace directory HTA has results for."""
    if "hta_run" in metafunc.fixturenames:
        runs = hta_runs()
        metafunc.parametrize("hta_run", runs, ids=[r["trace_dir"] for r in runs])


@pytest.fixture
def peer() -> Path:
    """The peer-traces directory (tests using it are skipped when it is absent)."""
    if PEER is None:
        pytest.skip("shared/peer-traces not available")
    return PEER
