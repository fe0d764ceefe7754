"""The kit's own process imports the standard library only (the GPU machine lacks the
recommender's wheels until the kit installs them); workloads need torch alone, and only the
kernels listing, run in the recommender's environment, imports the recommender."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2] / "bench" / "gpu"
ALLOWED = {
    "workloads.py": {"torch"},
    "kernels.py": {"perfweb_recommender"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names - {"__future__"}


@pytest.mark.parametrize("module", sorted(p.name for p in KIT.glob("*.py")))
def test_it_imports_only_the_standard_library_and_the_kit(module: str) -> None:
    outside = _imports(KIT / module) - sys.stdlib_module_names - {"bench"}
    assert outside <= ALLOWED.get(module, set()), f"{module} imports {sorted(outside)}"


def test_the_workloads_script_stands_alone_without_the_kit_package() -> None:
    assert "bench" not in _imports(KIT / "workloads.py")
