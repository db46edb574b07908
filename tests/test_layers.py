"""The package's layers (docs/architecture.md): no import circle, and no import from a higher layer into a lower one.

Every import counts: at module level, inside functions and under ``TYPE_CHECKING``. A module's layer is its
top-level name under ``microbench`` (a package, or a module such as ``options``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "microbench"

#: low to high; a layer may import from itself and the layers before it ("" is the package's own __init__)
LAYERS = (
    ("", "errors", "units", "output_files"),
    ("benchmarks",),
    ("options",),
    ("cluster",),
    ("measure",),
    ("records",),
    ("run",),
    ("doctor",),  # issue 45: uses cluster, measure, records
    ("results",),
    ("plotting",),
    ("gate",),
    ("workload",),
    ("importers",),
    ("replay",),
    ("report",),
    ("reframe",),
    ("cli", "__main__"),
)
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = ("microbench", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path) -> set[str]:
    """The microbench modules ``name`` imports anywhere in its source (resolved to modules that exist)."""
    out = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(parent + ([node.module] if node.module else []))
            # ``from package import module`` imports that module; ``from module import name`` the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            while target and target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name and target.startswith("microbench"):
                out.add(target)
    return out


GRAPH = {name: imported(name, path) for name, path in MODULES.items()}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1
                    stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on_stack.discard(member); component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_top_level_name_has_a_layer():
    assert {layer_of(m) for m in MODULES} <= set(RANK), {layer_of(m) for m in MODULES} - set(RANK)


def test_no_import_circle():
    assert circles(GRAPH) == []


def test_no_import_from_a_higher_layer():
    upward = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets
                    if RANK[layer_of(b)] > RANK[layer_of(a)])
    assert upward == []


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_circle_finder_finds_circles(graph, expected):
    assert circles(graph) == expected


def test_the_walk_sees_imports_inside_functions_and_type_checking():
    # options imports the benchmark table at module level and the workload sizes inside a function
    assert "microbench.benchmarks.workload_sizes" in GRAPH["microbench.options"]
    assert "microbench.benchmarks.table" in GRAPH["microbench.options"]
    # the run context imports its types under TYPE_CHECKING only
    assert "microbench.measure.transport" in GRAPH["microbench.run.context"]
