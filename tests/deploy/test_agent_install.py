"""The agent installs on its own into a user's training environment, `pip install ./contract
./agent`: with only its dependencies (the standard library, psutil, nvidia-ml-py and the
contract), no Django and no server code, and it leaves the user's torch alone (it depends on
nothing that pulls torch in; it uses the script's)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".*_cache")
# what a script run under the agent prints and exits with, unchanged by the agent
SCRIPT = "import sys\nprint('hello from the script', sum(range(10)))\nsys.exit(3)\n"
TORCH_SCRIPT = """
import sys

import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
print("trained", "django" in sys.modules)
"""
# each installed distribution: the names of what it requires, and the top-level folders it put
DISTRIBUTIONS = """
import importlib.metadata as m, json, re
shown = {}
for d in m.distributions():
    requires = sorted(re.split(r"[ =<>;\\[]", r)[0] for r in d.requires or [])
    top = {f.parts[0] for f in d.files or []} - {"..", "__pycache__"}
    shown[d.metadata["Name"]] = {
        "requires": requires,
        "top": sorted(t for t in top if not t.endswith((".dist-info", ".pth"))),
    }
print(json.dumps(shown))
"""
PROBE = (
    "import importlib.util as u, json; print(json.dumps({n: u.find_spec(n) is not None for n in"
    " ('django', 'perfweb', 'perfweb_recommender', 'perfweb_agent', 'perfweb_contract')}))"
)


def run(
    *argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None, status: int = 0
) -> str:
    """Runs a command outside this test environment (no VIRTUAL_ENV, no PYTHONPATH) and, by
    default, outside the checkout (whose perfweb.egg-info a Python started there would see)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("PERF_AGENT_")
    }
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**base, **(env or {})},
        cwd=cwd or "/",
    )
    assert done.returncode == status, f"{argv}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def sources(tmp_path: Path) -> tuple[Path, Path]:
    """Copies of contract/ and agent/: building in the checkout would leave build/ in it."""
    contract, agent = tmp_path / "src" / "contract", tmp_path / "src" / "agent"
    shutil.copytree(ROOT / "contract", contract, ignore=IGNORED)
    shutil.copytree(ROOT / "agent", agent, ignore=IGNORED)
    return contract, agent


def attached(venv: Path, script: str, tmp_path: Path) -> tuple[str, dict]:
    """`perf-agent attach --offline` on `script` with the venv's Python, from outside any
    checkout; the script's stdout and the worker's finish record."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "script.py").write_text(script)
    offline = work / "runs"
    env = {
        "PERF_AGENT_INTERVAL": "0.2",
        "PERF_AGENT_PROFILE": "0",
        "OMP_NUM_THREADS": "1",
        "PERF_AGENT_SPILL_DIR": str(work / "spill"),
    }
    expected = 3 if script == SCRIPT else 0
    attach = [venv / "bin" / "perf-agent", "attach", "--offline", offline, "--"]
    out = run(*attach, venv / "bin" / "python", "script.py", cwd=work, env=env, status=expected)
    (run_folder,) = offline.iterdir()
    starts = {d.name: json.loads((d / "start.json").read_text()) for d in run_folder.iterdir()}
    (worker,) = [name for name, body in starts.items() if body["role"] == "worker"]
    return out, json.loads((run_folder / worker / "finish.json").read_text())


def test_the_agent_installs_alone_with_its_dependencies_and_no_server(tmp_path: Path) -> None:
    """Fast: wheels built here, installed offline without dependencies, then the installed
    distributions' own requirements and files are read (the slow test below resolves them)."""
    contract, agent = sources(tmp_path)
    wheels = tmp_path / "wheels"
    pip, offline = [sys.executable, "-m", "pip"], ["--no-deps", "--no-index"]
    run(*pip, "wheel", "-q", *offline, "--no-build-isolation", "-w", wheels, contract, agent)
    venv = tmp_path / "train-env"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(*pip, "--python", python, "install", "-q", *offline, *sorted(wheels.glob("*.whl")))

    shown = json.loads(run(python, "-c", DISTRIBUTIONS))
    assert set(shown) == {"perfweb-agent", "perfweb-contract"}, shown
    assert shown["perfweb-agent"] == {
        "requires": ["nvidia-ml-py", "perfweb-contract", "psutil"],
        "top": ["perfweb_agent"],
    }
    assert shown["perfweb-contract"] == {"requires": [], "top": ["perfweb_contract"]}
    found = json.loads(run(python, "-c", PROBE))
    assert found == {
        "django": False,
        "perfweb": False,
        "perfweb_recommender": False,
        "perfweb_agent": True,
        "perfweb_contract": True,
    }

    # and the agent works there, from outside the checkout: the script runs unchanged
    # (psutil and nvidia-ml-py are absent here, which the agent tolerates) and is recorded
    assert "attach" in run(venv / "bin" / "perf-agent", "--help")
    out, finish = attached(venv, SCRIPT, tmp_path)
    assert out == "hello from the script 45\n"
    assert finish["exit_code"] == 3


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pip_install_contract_and_agent_into_a_torch_env_leaves_torch_and_has_no_django(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "train-env"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # the user's own torch; --no-compile: byte-compiling its 5,400 .py files took most of this
    # test's time on a busy host, and Python writes those caches on first import anyway
    run(python, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0")
    before = torch_fingerprint(python)
    contract, agent = sources(tmp_path)
    run(python, "-m", "pip", "install", "-q", contract, agent)  # the README's install line
    assert torch_fingerprint(python) == before
    installed = run(python, "-m", "pip", "list", "--format=freeze")
    assert "nvidia-ml-py==" in installed and "psutil==" in installed
    assert "perfweb-agent==" in installed and "perfweb-contract==" in installed
    assert "Django==" not in installed and "perfweb==" not in installed
    found = json.loads(run(python, "-c", PROBE))
    assert found["django"] is False and found["perfweb"] is False
    out, finish = attached(venv, TORCH_SCRIPT, tmp_path)
    assert out == "trained False\n"
    assert finish["exit_code"] == 0
    assert finish["produced"]["steps"] >= 6, finish  # the agent timed the optimizer's steps


def torch_fingerprint(python: Path) -> tuple[str, str]:
    """torch's version and a digest of its installed files' record (any reinstall, upgrade
    or downgrade changes it)."""
    version = run(python, "-c", "import importlib.metadata as m; print(m.version('torch'))")
    record = run(
        python,
        "-c",
        "import importlib.metadata as m; print(m.distribution('torch').read_text('RECORD'))",
    )
    return version.strip(), hashlib.sha256(record.encode()).hexdigest()
