"""The contract modules every part imports (the wire protocol, the offline layout) import the
standard library only, so the recommender and the server can read them without pulling in the
agent's runtime. The cross-package rules are import-linter contracts in pyproject.toml."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACT_MODULES = ["agent/protocol.py", "agent/layout.py"]


def imported_top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import reaches into the project
                names.add("." * node.level + (node.module or ""))
            elif node.module:
                names.add(node.module.split(".")[0])
    return names - {"__future__"}


@pytest.mark.parametrize("module", CONTRACT_MODULES)
def test_a_contract_module_imports_the_standard_library_only(module: str) -> None:
    outside = sorted(imported_top_level_names(ROOT / module) - sys.stdlib_module_names)
    assert outside == [], f"{module} imports {outside}"


def test_it_notices_an_import_of_the_project(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import json\nfrom agent import sender\nfrom . import buffer\n")
    assert imported_top_level_names(module) - sys.stdlib_module_names == {"agent", "."}
