"""Packaging that pyproject.toml cannot say by itself: the folders the product card names
(agent/, recommender/, contract/) are installed under distinctive import names, so that a
project's own `agent.py` or `recommender/` package is never shadowed by ours when
`perf-agent attach` starts the agent inside its script (tests/agent/test_import_names.py).

Everything else (metadata, dependencies, entry points, package data) is in pyproject.toml.
"""

from __future__ import annotations

import os

from setuptools import find_namespace_packages, find_packages, setup

# import name -> folder
FOLDERS = {
    "perfweb_agent": "agent",
    "perfweb_recommender": "recommender",
    "perfweb_contract": "contract",
}
FOLDERS = {name: folder for name, folder in FOLDERS.items() if os.path.isdir(folder)}


def packages() -> list[str]:
    """perfweb's own packages, and every package under each mapped folder, by import name."""
    found = find_namespace_packages(include=["perfweb", "perfweb.*"])
    for name, folder in FOLDERS.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(where=folder)]
    return found


setup(packages=packages(), package_dir=dict(FOLDERS))
