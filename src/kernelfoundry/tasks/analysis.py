"""Static facts about a reference source, read without running it.

`reference_op_count` counts the operations in `Model.forward` (calls and arithmetic operators): the
descriptor classifier compares a kernel's fused work against it to decide the algorithm axis.
"""

from __future__ import annotations

import ast


def reference_op_count(source: str) -> int:
    """Number of calls and arithmetic operators in `Model.forward`; at least 1. 0 for unparsable source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    count = sum(
                        1 for n in ast.walk(item) if isinstance(n, ast.Call | ast.BinOp | ast.UnaryOp)
                    )
                    return max(1, count)
    return 1
