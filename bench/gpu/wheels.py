"""The recommender's wheels for a GPU machine that has no package index.

    python -m bench.gpu.wheels fetch [--dest bench/gpu/wheels] [--python-version 3.12]

`fetch` (here, where pip reaches PyPI) downloads orjson, msgspec and numpy as binary wheels
for CPython 3.12 on manylinux x86-64 into an ignored folder; carry that folder to the GPU
machine. There `prepare()` installs only the ones its Python lacks, offline (`pip install
--no-index --no-deps --target DIR`), into a folder that goes on PYTHONPATH of the recommender's
process alone, so the machine's own CUDA torch and numpy stay what the workloads import.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE / "wheels"
REQUIRED = ("orjson", "msgspec", "numpy")  # pyproject.toml's `recommender` extra
PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
    "manylinux2014_x86_64", "manylinux1_x86_64",
)  # fmt: skip


def missing_modules(names: tuple[str, ...] | None = None) -> list[str]:
    """Which of `names` (default REQUIRED) this Python cannot import (found, not imported)."""
    return [name for name in names or REQUIRED if importlib.util.find_spec(name) is None]


def wheels_for(names: list[str], folder: Path) -> dict[str, Path]:
    """The wheel in `folder` for each name (the newest by file name when several)."""
    found: dict[str, Path] = {}
    for name in names:
        candidates = sorted(folder.glob(f"{name}-*.whl")) if folder.is_dir() else []
        if candidates:
            found[name] = candidates[-1]
    return found


def prepare(*, folder: Path = DEFAULT_DIR, target: Path) -> dict[str, Any]:
    """Make the recommender importable: what was missing, installed, and the PYTHONPATH entry.

    `ok` False says why in `reason` (no wheel for a missing module, pip failed); the kit then
    reports every analysis as skipped and still runs the agent-only checks.
    """
    missing = missing_modules()
    status: dict[str, Any] = {"missing": missing, "installed": [], "site": None, "ok": True}
    if not missing:
        status["reason"] = "all present"
        return status
    wheels = wheels_for(missing, folder)
    absent = [name for name in missing if name not in wheels]
    if absent:
        status.update(
            ok=False,
            reason=f"no wheel for {', '.join(absent)} in {folder} "
            "(run `python -m bench.gpu.wheels fetch` where pip works, carry it)",
        )
        return status
    target.mkdir(parents=True, exist_ok=True)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        str(target),
        *map(str, wheels.values()),
    ]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        status.update(ok=False, reason=f"pip install failed: {done.stderr.strip()[-300:]}")
        return status
    status.update(installed=[p.name for p in wheels.values()], site=str(target), reason="installed")
    return status


def package_paths(repo: Path) -> list[str]:
    """The repo's folders that hold its packages under their import names (agent/ holds
    perfweb_agent/, ...), then the repo itself (perfweb/, bench/): on PYTHONPATH they make an
    uninstalled checkout importable by the names the code uses."""
    folders = [repo / name for name in ("agent", "recommender", "contract")]
    return [str(folder) for folder in folders if folder.is_dir()] + [str(repo)]


def recommender_env(site: str | None, repo: Path) -> dict[str, str]:
    """The environment of a recommender process: the repo, then the wheels' folder."""
    env = dict(os.environ)
    parts = package_paths(repo) + ([site] if site else [])
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def fetch(*, dest: Path, python_version: str) -> int:
    """Download the wheels (no dependencies: the three have none) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(dest),
        *REQUIRED,
    ]
    return subprocess.run(argv, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """`fetch` the wheels (the only verb)."""
    parser = argparse.ArgumentParser(prog="python -m bench.gpu.wheels", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    get = sub.add_parser("fetch", help="download the wheels here")
    get.add_argument("--dest", type=Path, default=DEFAULT_DIR)
    get.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    args = parser.parse_args(argv)
    return fetch(dest=args.dest, python_version=args.python_version)


if __name__ == "__main__":
    sys.exit(main())
