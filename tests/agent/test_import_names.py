# perfweb-codemod: keep-names (the user project here has its own agent and recommender)
"""A project with its own `agent.py` and `recommender/` package runs unchanged under
`perf-agent attach`: ours are installed as `perfweb_agent` and `perfweb_recommender`, so the
script imports its own modules, and the agent still records the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

OWN_AGENT = """
NAME = "the project's own agent"


def step() -> str:
    return "own step"
"""

OWN_RECOMMENDER = """
def recommend() -> list[str]:
    return ["item-1", "item-2"]
"""

SCRIPT = """
import sys

import agent
import recommender
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
print(agent.NAME, agent.step(), recommender.recommend())
print(agent.__file__ == __file__.replace("train.py", "agent.py"))
sys.exit(3)
"""

EXPECTED = "the project's own agent own step ['item-1', 'item-2']\nTrue\n"


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "recommender").mkdir(parents=True)
    (project / "agent.py").write_text(OWN_AGENT)
    (project / "recommender" / "__init__.py").write_text(OWN_RECOMMENDER)
    (project / "train.py").write_text(SCRIPT)
    return project


def _env(tmp_path: Path) -> dict[str, str]:
    """The user's environment: nothing of perfweb's checkout on the path, fast agent ticks."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("PERF_AGENT_") and k != "PYTHONPATH"
    }
    env.update(
        PERF_AGENT_INTERVAL="0.2",
        PERF_AGENT_PROFILE="0",
        OMP_NUM_THREADS="1",
        PERF_AGENT_SPILL_DIR=str(tmp_path / "spill"),
    )
    return env


def _run(command: list[str], project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_projects_own_agent_and_recommender_modules_are_not_shadowed_under_attach(
    tmp_path: Path,
) -> None:
    project, env = _project(tmp_path), _env(tmp_path)
    perf_agent = Path(sys.executable).with_name("perf-agent")
    offline = tmp_path / "offline"

    plain = _run([sys.executable, "train.py"], project, env)
    attached = _run(
        [
            str(perf_agent),
            "attach",
            "--offline",
            str(offline),
            "--name",
            "own",
            "--",
            sys.executable,
            "train.py",
        ],
        project,
        env,
    )

    assert (plain.returncode, plain.stdout) == (3, EXPECTED), plain.stderr
    assert (attached.returncode, attached.stdout) == (plain.returncode, plain.stdout), (
        attached.stderr
    )
    (run,) = offline.iterdir()
    starts = {d.name: json.loads((d / "start.json").read_text()) for d in run.iterdir()}
    roles = sorted(body["role"] for body in starts.values())
    assert roles == ["launcher", "worker"], roles
    (worker,) = [name for name, body in starts.items() if body["role"] == "worker"]
    finish = json.loads((run / worker / "finish.json").read_text())
    assert finish["exit_code"] == 3
    assert finish["produced"]["steps"] >= 6, finish  # the agent timed the optimizer's steps


def test_the_import_names_are_ours_alone() -> None:
    """No top-level `agent` or `recommender` is installed: the names stay the user's."""
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(u.find_spec('agent'), u.find_spec('recommender'),"
            " u.find_spec('perfweb_agent') is not None, u.find_spec('perfweb_recommender') is not"
            " None)",
        ],
        cwd="/",
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert found.stdout.split() == ["None", "None", "True", "True"]
