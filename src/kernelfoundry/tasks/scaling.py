"""Reduced sizes for KernelBench-format tasks: the same structure, a CPU-sized amount of work.

KernelBench files size their inputs with module-level constants (`batch_size = 4096`, `dim = 393216`,
`height = width = 256`, `D, H, W = 16, 32, 32`, `input_shape = (32768,)`, derived ones such as
`bias_shape = (out_channels, 1, 1)`). A file sized for a data-centre GPU needs gigabytes and minutes on
a CPU. `reduced_sizes(source)` returns overrides of those constants (for a `ShapeVariant`, like a task's
`CPU_OVERRIDES`) that bring every tensor under `max_elements` and the matmul / convolution FLOPs under
`max_flops`, keeping each task's structure:

- only *sizes* shrink: literal integers (or literal tuples of them) of at least `2 * MIN_SIZE` whose
  names do not say they are a kernel extent, stride, padding, dilation, group count or pooling window;
  axis numbers (`dim = 1`), flags and floats are left alone;
- sizes of equal value shrink together (`height = width`, a LayerNorm over a last dimension that equals
  `out_channels`, square matrices): coincidences a task may rely on survive;
- a size is halved step by step, the largest first, never below `MIN_SIZE`, keeping its parity (4095 stays
  odd, so a row that is not a multiple of 4 stays so); a step the reference rejects (a window larger
  than its input, channels no longer divisible by the groups) or that does not reduce the cost is not
  taken, and that size stays; when no single size can shrink, all of them are halved at once (sizes
  tied by arithmetic, such as a transposed conv's output width and a LayerNorm's channels); a batch
  (`batch*`) may shrink to 1;
- derived constants are evaluated again from the reduced ones and returned too, since overrides are
  applied to the module's globals after it ran.

The cost of a candidate size set comes from `measure(source, overrides) -> Cost`. The default,
`measure_on_meta`, runs `get_init_inputs`, `Model(...)`, `get_inputs` and `forward` on torch's meta
device (shapes only: no memory, no arithmetic) under torch's FLOP counter, so it executes the
reference's Python: call it where the reference may run (the proposer and the validation child do).
The search itself (`reduced_sizes` with a given `measure`) is pure: `ast` and arithmetic only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MIN_SIZE = 4
DEFAULT_MAX_ELEMENTS = 2**22
DEFAULT_MAX_FLOPS = 2**28
_MAX_STEPS = 200

_STRUCTURAL = re.compile(r"kernel|stride|pad|dilation|group|pool|window", re.IGNORECASE)


@dataclass(frozen=True)
class Cost:
    """What one size set costs: the largest tensor (inputs, parameters, outputs) and the FLOPs."""

    max_elements: int
    flops: int

    def within(self, max_elements: int, max_flops: int) -> bool:
        return self.max_elements <= max_elements and self.flops <= max_flops


Measure = Callable[[str, Mapping[str, Any]], Cost]


class SizeRejected(Exception):
    """The reference cannot run at the proposed sizes (raised by a `measure`)."""


def reduced_sizes(
    source: str,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    max_flops: int = DEFAULT_MAX_FLOPS,
    measure: Measure | None = None,
) -> dict[str, Any]:
    """Overrides of `source`'s module-level size constants within the budget (see the module
    docstring); {} when the task already fits, has no sizes, does not parse or cannot be measured.
    Values are ints or tuples of ints, ready for `ShapeVariant(name, overrides)`."""
    measure = measure or measure_on_meta
    try:
        assignments = _assignments(ast.parse(source))
    except SyntaxError:
        return {}
    env = _evaluate(assignments, {})
    roots = [name for name, expr in assignments if _is_literal(expr) and name in env]
    slots = [slot for name in dict.fromkeys(roots) for slot in _size_slots(name, env[name])]
    if not slots:
        return {}
    groups: dict[int, list[tuple[str, int | None]]] = {}
    for name, index in slots:
        groups.setdefault(_slot_value(env, name, index), []).append((name, index))
    values = {original: original for original in groups}
    # A batch only needs one item to keep its structure; other sizes keep MIN_SIZE.
    floors = {
        g: 1 if all(name.startswith("batch") for name, _ in members) else MIN_SIZE
        for g, members in groups.items()
    }

    def overrides_for(current: Mapping[int, int]) -> dict[str, Any]:
        roots_changed: dict[str, Any] = {}
        for original, members in groups.items():
            for name, index in members:
                base = roots_changed.get(name, env[name])
                if index is None:
                    roots_changed[name] = current[original]
                else:
                    items = list(base)
                    items[index] = current[original]
                    roots_changed[name] = tuple(items)
        derived = _evaluate(assignments, roots_changed)
        return {name: value for name, value in derived.items() if value != env.get(name)}

    try:
        cost = measure(source, {})
    except SizeRejected:
        return {}
    frozen: set[int] = set()
    for _ in range(_MAX_STEPS):
        if cost.within(max_elements, max_flops):
            break
        open_groups = [g for g in groups if g not in frozen and _halved(values[g]) >= floors[g]]
        if open_groups:
            widest = max(open_groups, key=lambda g: (values[g], g))
            trial = {**values, widest: _halved(values[widest])}
        else:
            # Sizes tied by the reference's arithmetic (a transposed conv's output width equal to the
            # channels a LayerNorm expects) only shrink together: halve every size at once.
            trial = {g: _halved(v) if _halved(v) >= floors[g] else v for g, v in values.items()}
            widest = None
        accepted = _try(measure, source, overrides_for(trial), cost)
        if accepted is None:
            if widest is None:
                break
            frozen.add(widest)
            continue
        values, cost = trial, accepted
        if widest is None:
            frozen.clear()
    return overrides_for(values)


def _try(measure: Measure, source: str, overrides: Mapping[str, Any], current: Cost) -> Cost | None:
    """The cost at `overrides` when the reference runs there and it is lower than `current`."""
    try:
        cost = measure(source, overrides)
    except SizeRejected:
        return None
    if (cost.max_elements, cost.flops) >= (current.max_elements, current.flops):
        return None
    return cost


def measure_on_meta(source: str, overrides: Mapping[str, Any]) -> Cost:
    """The cost of the reference at `overrides`, measured on torch's meta device. Raises SizeRejected
    when the reference fails there (at these sizes, or on meta at all)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kernelfoundry.tasks.model import TaskError
    from kernelfoundry.tasks.reference import load_reference_module

    try:
        module = load_reference_module(source, overrides)
        with torch.device("meta"):
            model = module.Model(*module.__dict__.get("get_init_inputs", lambda: [])())
            inputs = list(module.get_inputs())
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                result = model.eval()(*inputs)
    except (TaskError, Exception) as exc:  # the reference's own code: any failure rejects the sizes
        raise SizeRejected(f"{type(exc).__name__}: {exc}") from exc
    outputs = result if isinstance(result, tuple | list) else [result]
    if any(isinstance(t, torch.Tensor) and 0 in t.shape for t in outputs):
        # some torch versions' meta kernels return an empty result where the real op refuses
        raise SizeRejected("an output has a dimension of size 0")
    tensors = [*inputs, *model.parameters(), *model.buffers(), *outputs]
    largest = max((t.numel() for t in tensors if isinstance(t, torch.Tensor)), default=0)
    return Cost(int(largest), int(counter.get_total_flops()))


def _assignments(tree: ast.Module) -> list[tuple[str, ast.expr]]:
    """Module-level `name = expr` pairs in order (chains and tuple unpacking split into names)."""
    found: list[tuple[str, ast.expr]] = []
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                found.append((target.id, node.value))
            elif (
                isinstance(target, ast.Tuple)
                and isinstance(node.value, ast.Tuple)
                and len(target.elts) == len(node.value.elts)
            ):
                for t, v in zip(target.elts, node.value.elts, strict=True):
                    if isinstance(t, ast.Name):
                        found.append((t.id, v))
    return found


def _evaluate(assignments: list[tuple[str, ast.expr]], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The constants' values in order, `overrides` replacing roots; unevaluable ones left out."""
    env: dict[str, Any] = {}
    for name, expr in assignments:
        if name in overrides and _is_literal(expr):
            env[name] = overrides[name]
            continue
        try:
            env[name] = _eval(expr, env)
        except (_NotConstant, ArithmeticError, TypeError):
            env.pop(name, None)
    return env


class _NotConstant(Exception):
    pass


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Div: lambda a, b: a / b,
}


def _eval(expr: ast.expr, env: Mapping[str, Any]) -> Any:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int | float | bool | str):
        return expr.value
    if isinstance(expr, ast.Name) and expr.id in env:
        return env[expr.id]
    if isinstance(expr, ast.Tuple | ast.List):
        items = tuple(_eval(e, env) for e in expr.elts)
        return items if isinstance(expr, ast.Tuple) else list(items)
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return -_eval(expr.operand, env)
    if isinstance(expr, ast.BinOp) and type(expr.op) in _BINOPS:
        return _BINOPS[type(expr.op)](_eval(expr.left, env), _eval(expr.right, env))
    raise _NotConstant


def _is_literal(expr: ast.expr) -> bool:
    """Whether the expression names no other constant (`4096 * 2`, `(32768,)`): a root to shrink."""
    if any(isinstance(n, ast.Name) for n in ast.walk(expr)):
        return False
    try:
        _eval(expr, {})
    except (_NotConstant, ArithmeticError, TypeError):
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size_slots(name: str, value: Any) -> list[tuple[str, int | None]]:
    """The shrinkable places of one root constant: itself, or elements of a literal tuple."""
    if _STRUCTURAL.search(name):
        return []
    if _is_int(value):
        return [(name, None)] if value >= 2 * MIN_SIZE else []
    if isinstance(value, tuple) and all(_is_int(v) for v in value):
        return [(name, i) for i, v in enumerate(value) if v >= 2 * MIN_SIZE]
    return []


def _slot_value(env: Mapping[str, Any], name: str, index: int | None) -> int:
    value = env[name]
    return int(value if index is None else value[index])


def _halved(value: int) -> int:
    """Half the value, of the same parity (an odd size stays odd)."""
    half = value // 2
    if value % 2 == 1 and half % 2 == 0:
        half -= 1
    return half
