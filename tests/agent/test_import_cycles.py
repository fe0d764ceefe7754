"""Each package's modules (the agent, the recommender, the contract and the server) import
one another without a cycle, imports inside functions included (scripts/import_cycles.py);
the layers themselves are import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cycles_script() -> ModuleType:
    path = ROOT / "scripts" / "import_cycles.py"
    spec = importlib.util.spec_from_file_location("import_cycles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_cycles", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("folder", "package"),
    [
        ("agent/perfweb_agent", "perfweb_agent"),
        ("recommender/perfweb_recommender", "perfweb_recommender"),
        ("contract/perfweb_contract", "perfweb_contract"),
        ("perfweb", "perfweb"),  # the server: Django apps, their services and tasks
    ],
)
def test_no_package_has_an_import_cycle_not_even_through_a_function(
    folder: str, package: str
) -> None:
    assert cycles_script().main([str(ROOT / folder), package]) == 0


def test_it_finds_a_cycle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("def later():\n    from pkg.a import x\n")
    script = cycles_script()
    graph = {
        name: script.imports_of(name, path, {"pkg", "pkg.a", "pkg.b"})
        for name, path in script.module_names(tmp_path, "pkg").items()
    }
    assert script.cycles(graph) == [["pkg.a", "pkg.b"]]
