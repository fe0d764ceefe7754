"""The contract every part imports (contract/perfweb_contract/: the wire protocol and API
paths, the offline layout, the knob catalogue, the verdict names) imports the standard library
only, so the agent, the recommender and the server can all read it without pulling in each
other. The cross-package rules are import-linter contracts in pyproject.toml."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contract" / "perfweb_contract"
CONTRACT_MODULES = sorted(str(p.relative_to(ROOT)) for p in CONTRACT.glob("*.py"))


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
    module.write_text(
        "import json\nfrom perfweb_agent.delivery import sender\nfrom . import buffer\n"
    )
    assert imported_top_level_names(module) - sys.stdlib_module_names == {"perfweb_agent", "."}


def test_the_contract_holds_every_shared_module_and_the_agent_no_copy_of_one() -> None:
    assert {Path(m).stem for m in CONTRACT_MODULES} >= {
        "__init__",
        "api",
        "knobs",
        "layout",
        "protocol",
        "verdicts",
    }
    assert not (ROOT / "agent" / "perfweb_agent" / "protocol.py").exists()
    assert not (ROOT / "agent" / "perfweb_agent" / "layout.py").exists()


def agent_modules_imported(folder: str) -> set[str]:
    """The `perfweb_agent.*` modules that any module under `folder` imports."""
    found: set[str] = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module.split(".")[0] == "perfweb_agent":
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == "perfweb_agent")
    return found


def test_the_server_reads_the_shared_facts_from_the_contract_not_from_the_agent() -> None:
    # The A/B statistics with which the server recomputes a job's result from its stored arms
    # (docs/security.md) are the contract's (perfweb_contract.ab), as is everything else.
    assert agent_modules_imported("perfweb") == set()
    assert agent_modules_imported("recommender/perfweb_recommender") == set()
