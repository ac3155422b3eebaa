"""Modules that run as scripts (`python -m ...`: the runner, the judge, the sandbox's entry) execute
their `if __name__ == "__main__":` block as soon as it is reached: anything defined after it does not
exist yet while the script runs, though every import of the module sees it. A helper placed there
passed every test that imports the runner and failed every CUDA candidate with NameError."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[3] / "src" / "kernelfoundry"


def _is_main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators)
    )


def test_a_scripts_main_guard_is_its_last_statement() -> None:
    scripts = []
    for path in sorted(SOURCE.rglob("*.py")):
        body = ast.parse(path.read_text(), str(path)).body
        guards = [i for i, node in enumerate(body) if _is_main_guard(node)]
        if guards:
            scripts.append(path.relative_to(SOURCE))
            where = path.relative_to(SOURCE)
            assert guards == [len(body) - 1], f"{where}: statements after its __main__ guard"
    assert Path("evaluation/runner.py") in scripts  # the walk found the scripts
