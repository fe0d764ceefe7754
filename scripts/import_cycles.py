"""Import cycles inside one package, imports inside functions included.

    .venv/bin/python scripts/import_cycles.py agent perfweb_agent            # modules
    .venv/bin/python scripts/import_cycles.py agent perfweb_agent --depth 2  # subpackages

Reads every module of the folder with `ast` (nothing is imported), draws an edge for each
import of a module of the same package wherever it sits (module level, function, `if
TYPE_CHECKING:` block), and prints the strongly connected components of more than one module:
each is at least one cycle. A package's `__init__` counts as a module of its own, as grimp
counts it; importing `a.b.c` is an edge to `a.b.c` alone. With `--depth N` each module is
counted as its name's first N parts (`perfweb_agent.runtime`): cycles between folders.
Exit status 1 when there is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_names(folder: Path, package: str) -> dict[str, Path]:
    """Each module's import name -> its file."""
    names: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([package, *parts])] = path
    return names


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            # `from a import b`: an edge to the module a.b where there is one, else to a
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        found.update(t for t in targets if t in known and t != name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def collapsed(graph: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The graph between the names' first `depth` parts (no edge from a group to itself)."""

    def group(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    groups: dict[str, set[str]] = {}
    for name, targets in graph.items():
        edges = groups.setdefault(group(name), set())
        edges.update(group(t) for t in targets)
    for name, edges in groups.items():
        edges.discard(name)
        for target in edges:
            groups.setdefault(target, set())
    return groups


def main(argv: list[str]) -> int:
    folder, package = Path(argv[0]), argv[1]
    depth = int(argv[argv.index("--depth") + 1]) if "--depth" in argv else 0
    names = module_names(folder, package)
    known = set(names)
    graph = {name: imports_of(name, path, known) for name, path in names.items()}
    if depth:
        graph = collapsed(graph, depth)
    found = cycles(graph)
    for component in found:
        print(f"cycle among {len(component)} modules:")
        for member in component:
            inside = sorted(graph[member] & set(component))
            print(f"  {member} -> {', '.join(inside)}")
    counted = "folders" if depth else "modules"
    print(f"{len(found)} import cycle(s) in {package} ({len(graph)} {counted})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
