"""The bus boundary: only kernelfoundry.bus.jetstream imports nats, and no service, no service host and
no module outside the bus reaches into a JetStream bus's connection or context (`.js`, `.nc`): they speak
the Bus protocol, so the in-memory bus runs them too."""

from __future__ import annotations

import ast
from pathlib import Path

from kernelfoundry.bus.memory import subject_matches

ROOT = Path(__file__).resolve().parents[3]
JETSTREAM = ROOT / "src" / "kernelfoundry" / "bus" / "jetstream.py"


def product_modules() -> list[Path]:
    return sorted([*(ROOT / "src" / "kernelfoundry").rglob("*.py"), *(ROOT / "services").rglob("*.py")])


def test_only_the_jetstream_module_imports_nats() -> None:
    importers = []
    for path in product_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(name == "nats" or name.startswith("nats.") for name in names):
                importers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert {i.split(":")[0] for i in importers} == {str(JETSTREAM.relative_to(ROOT))}, importers


def test_nothing_outside_the_jetstream_module_touches_a_bus_connection_or_context() -> None:
    reaches = []
    for path in product_modules():
        if path == JETSTREAM:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("js", "nc"):
                reaches.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert reaches == []


def test_subjects_match_as_nats_wildcards_do() -> None:
    assert subject_matches("kf.events.>", "kf.events.run.submitted")
    assert not subject_matches("kf.events.>", "kf.events")
    assert subject_matches("kf.compile.*.x86_64", "kf.compile.cpu.x86_64")
    assert not subject_matches("kf.compile.*", "kf.compile.cpu.x86_64")
    assert subject_matches("kf.execute.cpu.x86_64", "kf.execute.cpu.x86_64")
    assert not subject_matches("kf.execute.cpu.x86_64", "kf.execute.cpu")
