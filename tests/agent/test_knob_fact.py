"""A run the agent changed with a knob says so: the fact `ab.knobs`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.agent.conftest import attach, online, write_script


def test_a_run_with_a_knob_applied_says_so_in_its_facts(
    tmp_path: Path, server: Any, agent_env: dict[str, str]
) -> None:
    """The comparison page names the knob a job's candidate ran with: the agent records
    PERF_AGENT_KNOBS as the fact `ab.knobs` (a run without knobs has none)."""
    script = write_script(tmp_path, "print('ok')\n")
    env = {**agent_env, "PERF_AGENT_KNOBS": "threads=1"}
    done = attach([*online(server), "--", sys.executable, str(script)], env)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert server.store.facts().get("ab.knobs") == "threads=1"
