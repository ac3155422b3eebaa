"""Layering rules, read from the source with `ast` (nothing is imported to check them, except in the last
test, which imports the domain in a fresh interpreter and looks at what came with it).

- The domain (kernelfoundry.domain) is the innermost layer: it imports only itself and pure standard
  library modules (no transport, database, file, process, network, clock or GPU library), and calls no
  I/O builtin.
- No import cycle between top-level packages: kernelfoundry.<package> (or top-level module) and each
  service (kernelfoundry.services.<service>). Imports inside functions count too: a lazy import hides a
  cycle from the interpreter, not from a reader.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = {"kernelfoundry": ROOT / "src" / "kernelfoundry", "kernelfoundry.services": ROOT / "services"}
GENERATED = ("kernelfoundry.v1",)  # protoc output: not the project's code

# Standard-library modules the domain may use: none performs I/O, reads a clock or starts anything.
# Add one only if that stays true.
PURE_STDLIB = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "collections",
        "collections.abc",
        "copy",
        "dataclasses",
        "enum",
        "fractions",
        "functools",
        "hashlib",
        "heapq",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "random",
        "re",
        "statistics",
        "string",
        "textwrap",
        "types",
        "typing",
    }
)
IO_BUILTINS = frozenset({"open", "input", "print", "exec", "eval", "compile", "__import__", "breakpoint"})
# What must not be loaded by importing the domain (checked in a fresh interpreter).
IO_MODULES = (
    "nats",
    "grpc",
    "google.protobuf",
    "sqlite3",
    "pymongo",
    "motor",
    "httpx",
    "structlog",
    "torch",
    "numpy",
    "subprocess",
    "socket",
    "asyncio",
    "kernelfoundry.bus",
    "kernelfoundry.lineage",
    "kernelfoundry.v1",
)


def modules() -> Iterator[tuple[str, Path]]:
    """Every project module: (dotted name, file)."""
    for base, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if base == "kernelfoundry" and parts[0] == "services":
                continue  # a build link to services/, if one exists: read through SOURCES instead
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([base, *parts])
            if not name.startswith(GENERATED):
                yield name, path


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement in the file, nested ones included."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module in ("kernelfoundry", "kernelfoundry.services"):  # `from kernelfoundry import x`
                for alias in node.names:
                    yield f"{module}.{alias.name}", node.lineno
            else:
                yield module, node.lineno


def top_level(module: str) -> str:
    """kernelfoundry.domain.archive -> kernelfoundry.domain; kernelfoundry.services.llm.handlers ->
    kernelfoundry.services.llm; kernelfoundry.codec -> kernelfoundry.codec."""
    parts = module.split(".")
    depth = 3 if parts[1:2] == ["services"] and len(parts) > 2 else 2
    return ".".join(parts[:depth])


def test_the_domain_imports_only_itself_and_pure_standard_library_modules():
    found = []
    domain = [(name, path) for name, path in modules() if name.startswith("kernelfoundry.domain")]
    assert len(domain) > 10, "the domain package was not found"
    for name, path in domain:
        for module, line in imports(name, path):
            if module.startswith("kernelfoundry."):
                if not module.startswith("kernelfoundry.domain"):
                    found.append(f"{path.relative_to(ROOT)}:{line} imports {module} (outside the domain)")
            elif module not in PURE_STDLIB:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not found, "\n".join(found)


def test_the_domain_calls_no_io_builtin():
    found = []
    for name, path in modules():
        if not name.startswith("kernelfoundry.domain"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_BUILTINS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {node.func.id}()")
    assert not found, "\n".join(found)


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the `module:line`s that import it."""
    graph: dict[str, dict[str, list[str]]] = {}
    for name, path in modules():
        for module, line in imports(name, path):
            if not module.startswith("kernelfoundry.") or module.startswith(GENERATED):
                continue
            source, target = top_level(name), top_level(module)
            if source != target:
                graph.setdefault(source, {}).setdefault(target, []).append(f"{name}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    graph = {"a": {"b": ["a.x:1"]}, "b": {"c": ["b.y:2"]}, "c": {"a": ["c.z:3"]}, "d": {"a": ["d.w:4"]}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": []}, "b": {}}) == []


def test_no_import_cycle_between_top_level_packages():
    graph = package_graph()
    assert "kernelfoundry.tasks" in graph and "kernelfoundry.services.evolver" in graph
    found = cycles(graph)
    lines = []
    for component in found:
        for source in component:
            for target in component:
                for where in graph.get(source, {}).get(target, [])[:3]:
                    lines.append(f"{source} -> {target} ({where})")
    assert not found, "import cycles between packages:\n" + "\n".join(lines)


def test_importing_the_whole_domain_loads_nothing_with_io():
    names = sorted(name for name, _ in modules() if name.startswith("kernelfoundry.domain"))
    program = (
        "import importlib, json, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout
    )
    assert "kernelfoundry.domain.engine" in loaded
    bad = [m for m in loaded if any(m == io or m.startswith(io + ".") for io in IO_MODULES)]
    assert not bad, f"importing the domain loaded {bad}"
