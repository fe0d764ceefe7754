"""The packages sit in folders named as they are imported (agent/perfweb_agent/, ...), and the
installs are quiet: every importable folder is a package of each install that carries it (the
server's, at the root, and the agent's, the recommender's and the contract's own), so setuptools
has nothing to warn about (it printed 40 lines on perfweb_agent._boot, which has no __init__.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools.config.pyprojecttoml import read_configuration

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "perfweb_agent": "agent",
    "perfweb_recommender": "recommender",
    "perfweb_contract": "contract",
}


def packages_of(project: Path) -> set[str]:
    """The packages the pyproject.toml in `project` installs, as setuptools finds them."""
    cwd = os.getcwd()
    os.chdir(project)  # setuptools finds packages relative to the project
    try:
        config = read_configuration(project / "pyproject.toml", expand=True)
    finally:
        os.chdir(cwd)
    return set(config["tool"]["setuptools"]["packages"])


def importable_folders(package_root: Path, name: str) -> set[str]:
    """Every folder of Python modules under a package's folder, by dotted import name."""
    found = set()
    for directory, _dirs, files in os.walk(package_root):
        relative = Path(directory).relative_to(package_root)
        if "__pycache__" in relative.parts or not any(f.endswith(".py") for f in files):
            continue
        found.add(".".join([name, *relative.parts]))
    return found


def test_each_package_sits_in_a_folder_named_as_it_is_imported() -> None:
    for name, folder in FOLDERS.items():
        assert (ROOT / folder / name / "__init__.py").is_file()
        # nothing importable beside the package: the folder holds it, its pyproject, its README
        assert not list((ROOT / folder).glob("*.py")), f"{folder}/ has modules outside {name}/"


def test_the_server_install_carries_every_importable_folder() -> None:
    packages = packages_of(ROOT)
    for name, folder in FOLDERS.items():
        missing = importable_folders(ROOT / folder / name, name) - packages
        assert not missing, f"importable but not installed: {sorted(missing)}"
    assert importable_folders(ROOT / "perfweb", "perfweb") <= packages
    assert "perfweb_agent._boot" in packages


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_each_folder_s_own_install_carries_its_package_and_nothing_else(name: str) -> None:
    project = ROOT / FOLDERS[name]
    packages = packages_of(project)
    assert packages == importable_folders(project / name, name)
    assert all(p == name or p.startswith(name + ".") for p in packages)


def test_the_image_builds_the_server_from_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """The Dockerfile's COPY lines, replayed into an empty folder, are enough for the server's
    wheel, and it carries all four packages (the image once left contract/ out)."""
    context = tmp_path / "app"
    context.mkdir()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            *copied, _dest = line.split()[1:]
            for name in copied:
                source = ROOT / name
                if source.is_dir():
                    shutil.copytree(
                        source,
                        context / name,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"),
                    )
                else:
                    shutil.copy(source, context / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(context),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("perfweb-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
    assert {"perfweb", *FOLDERS} <= top
    assert "perfweb_agent/_boot/sitecustomize.py" in archive.namelist()


def test_the_server_install_asks_for_what_each_folder_s_own_install_asks_for() -> None:
    """The root's `agent` and `recommender` extras and its `perf-agent` command are the same
    as those folders' own pyproject.toml say (both installs carry the same code)."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    contract = tomllib.loads((ROOT / "contract" / "pyproject.toml").read_text())["project"]
    for extra in ("agent", "recommender"):
        own = tomllib.loads((ROOT / extra / "pyproject.toml").read_text())["project"]
        needs = [d for d in own["dependencies"] if not d.startswith("perfweb-contract")]
        assert f"perfweb-contract=={contract['version']}" in own["dependencies"], extra
        assert sorted(root["optional-dependencies"][extra]) == sorted(needs), extra
        assert own.get("scripts", {}).items() <= root["scripts"].items(), extra
        assert own["version"] == root["version"]
