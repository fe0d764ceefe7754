"""The contract every part imports (contract/: the wire protocol and API paths, the offline
layout, the knob catalogue, the verdict names) imports the standard library only, so the
agent, the recommender and the server can all read it without pulling in each other. The
cross-package rules are import-linter contracts in pyproject.toml."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACT_MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "contract").glob("*.py"))


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
    module.write_text("import json\nfrom perfweb_agent.delivery import sender\nfrom . import "
                      "buffer\n")
    assert imported_top_level_names(module) - sys.stdlib_module_names == {"perfweb_agent", "."}


def test_the_contract_holds_every_shared_module_and_the_agent_no_copy_of_one() -> None:
    assert {Path(m).stem for m in CONTRACT_MODULES} >= {
        "__init__", "api", "knobs", "layout", "protocol", "verdicts",
    }  # fmt: skip
    assert not (ROOT / "agent" / "protocol.py").exists()
    assert not (ROOT / "agent" / "layout.py").exists()


def agent_modules_imported(package: str) -> set[str]:
    """The `perfweb_agent.*` modules that any module of `package` imports."""
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module.split(".")[0] == "perfweb_agent":
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(
                    a.name for a in node.names if a.name.split(".")[0] == "perfweb_agent"
                )
    return found


def test_the_server_reads_the_shared_facts_from_the_contract_not_from_the_agent() -> None:
    # The A/B statistics are the engine's own function, which the server calls to recompute
    # a job's result from its stored arms (docs/security.md); everything else is the contract.
    assert agent_modules_imported("perfweb") <= {"perfweb_agent.ab.stats"}
    assert agent_modules_imported("recommender") == set()
