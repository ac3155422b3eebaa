"""A static outline of a reference source: does it parse, define Model and get_inputs, which globals.

Uses `ast` only, so loading a task never executes user code (running it is validation's job, in a
child process). Module-level globals are what shape variants may override.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelfoundry.tasks.model import TaskError

REQUIRED = (("Model", "missing_model"), ("get_inputs", "missing_get_inputs"))


@dataclass(frozen=True)
class ReferenceOutline:
    globals: frozenset[str]  # every name bound at module level


def outline_reference(source: str, origin: str) -> ReferenceOutline:
    """Parse the reference; raises TaskError(import_error | missing_model | missing_get_inputs)."""
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as exc:
        raise TaskError(
            "import_error", f"{origin}:{exc.lineno}: reference source does not parse: {exc.msg}"
        ) from exc
    names = frozenset(_module_level_names(tree.body))
    for name, reason in REQUIRED:
        if name not in names:
            what = "class `Model(nn.Module)`" if name == "Model" else "function `get_inputs()`"
            raise TaskError(reason, f"{origin}: reference source defines no {what} at module level")
    return ReferenceOutline(globals=names)


def _module_level_names(body: list[ast.stmt]) -> set[str]:
    """Names bound by module-level statements, including inside module-level if/for/while/with/try."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue  # their bodies bind locals and attributes, not globals
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        for target in _binding_targets(node):
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for block in ("body", "orelse", "finalbody"):
            names.update(_module_level_names(getattr(node, block, None) or []))
        for handler in getattr(node, "handlers", None) or []:
            names.update(_module_level_names(handler.body))
            if handler.name:
                names.add(handler.name)
    return names


def _binding_targets(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        return [node.target]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []
