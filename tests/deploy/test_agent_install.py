"""`pip install 'perfweb[agent]'` into a user's existing training environment leaves their
torch alone: the agent depends on nothing that pulls torch in (it uses the script's)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run(*argv: str | Path, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=600, env=env, cwd=cwd
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def torch_fingerprint(python: Path) -> tuple[str, str]:
    """torch's version and a digest of its installed files' record (any reinstall, upgrade
    or downgrade changes it)."""
    version = run(python, "-c", "import importlib.metadata as m; print(m.version('torch'))")
    record = run(
        python, "-c",
        "import importlib.metadata as m; print(m.distribution('torch').read_text('RECORD'))",
    )
    return version.strip(), hashlib.sha256(record.encode()).hexdigest()


def test_installing_the_agent_extra_leaves_the_user_s_torch_unchanged(tmp_path: Path) -> None:
    venv = tmp_path / "train-env"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "torch==2.13.0")  # the user's own torch
    before = torch_fingerprint(python)
    # from a copy of the source: building in the checkout would leave build/ behind in it
    source = tmp_path / "perfweb"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".data", "build", "*.egg-info", "__pycache__", ".*_cache"))
    run(python, "-m", "pip", "install", "-q", f"{source}[agent]")
    assert torch_fingerprint(python) == before
    # and the agent works there, from outside the checkout
    assert "attach" in run(venv / "bin" / "perf-agent", "--help", cwd=tmp_path)
    installed = run(python, "-m", "pip", "list", "--format=freeze")
    assert "nvidia-ml-py==" in installed and "psutil==" in installed
    assert "Django==" not in installed  # the server's dependencies stay out
