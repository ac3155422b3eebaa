"""Static checks of a candidate's Python glue (KernelBench-style `ModelNew`) before it ever runs.

Pure: parses with `ast`, imports nothing of the glue and never executes it. Each rule has its own
reason code (see reasons.py). The reference-fallback rule: the glue may keep some heavy ops in vendor
libraries, but it must not call the reference (`Model`, its forward, the reference module), and it must
not perform every operation the reference performs (for a one-op task, that is calling that op at all);
operations are compared by name, operators (`a @ b`, `a * b`) counting as their torch function.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelfoundry.evaluation import reasons

THREAD_MODULES = {"threading", "_thread", "multiprocessing", "subprocess", "concurrent", "asyncio", "signal"}
TIMER_MODULES = {"time", "timeit", "resource"}
IO_MODULES = {
    "socket",
    "urllib",
    "requests",
    "httpx",
    "http",
    "ftplib",
    "smtplib",
    "shutil",
    "pathlib",
    "io",
    "tempfile",
    "pickle",
    "os",
    "sys",
    "ctypes",
    "glob",
}
DYNAMIC_CALLS = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "getattr",
    "setattr",
    "delattr",
}
IO_CALLS = {"open", "input", "breakpoint"}
IO_METHODS = {
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "system",
    "popen",
    "spawnv",
    "execv",
    "execve",
    "urlopen",
    "load",
    "save",
}
TIMER_NAMES = {
    "Event",
    "elapsed_time",
    "synchronize",
    "perf_counter",
    "perf_counter_ns",
    "time_ns",
    "monotonic",
    "record",
    "profiler",
    "Timer",
}
LAZY_NAMES = {
    "__torch_function__",
    "__torch_dispatch__",
    "_make_subclass",
    "_make_wrapper_subclass",
    "TorchDispatchMode",
    "TorchFunctionMode",
    "FakeTensor",
    "LazyTensor",
}
# Names that describe data, not computation: never counted as the reference's operations.
NEUTRAL_OPS = {
    "empty",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "tensor",
    "view",
    "reshape",
    "contiguous",
    "size",
    "to",
    "float",
    "double",
    "half",
    "cuda",
    "cpu",
    "device",
    "dim",
    "numel",
    "super",
    "__init__",
    "Module",
    "Parameter",
    "parameters",
    "randn",
    "rand",
    "randint",
    "manual_seed",
    "int",
    "len",
    "range",
    "list",
    "tuple",
    "isinstance",
    "unsqueeze",
    "squeeze",
    "expand",
    "flatten",
    "permute",
    "transpose",
    "t",
    "stride",
    "register_buffer",
    "data_ptr",
    "item",
    "append",
    "dtype",
    "shape",
    "type",
    "no_grad",
    "Sequential",
    "ModuleList",
    "sqrt",
    "min",
    "max",
    "abs",
}
OPERATOR_OPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.MatMult: "matmul",
    ast.Pow: "pow",
    ast.Mod: "remainder",
    ast.FloorDiv: "floor_divide",
}
OP_ALIASES = {
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "true_divide": "div",
    "mm": "matmul",
    "bmm": "matmul",
    "__matmul__": "matmul",
    "Linear": "linear",
    "ReLU": "relu",
    "GELU": "gelu",
    "Softmax": "softmax",
    "Conv2d": "conv2d",
    "Conv1d": "conv1d",
    "Conv3d": "conv3d",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "LayerNorm": "layer_norm",
    "BatchNorm2d": "batch_norm",
    "sum": "sum",
    "einsum": "einsum",
    "addmm": "matmul",
    "baddbmm": "matmul",
}


@dataclass(frozen=True)
class GlueFinding:
    reason: str
    message: str
    line: int


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def operations(tree: ast.AST) -> set[str]:
    """Computational operation names used in `tree`: calls' last name component, and arithmetic operators."""
    ops: set[str] = set()
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Call):
            name = _dotted(node.func).rsplit(".", 1)[-1]
        elif isinstance(node, ast.BinOp | ast.AugAssign):
            name = OPERATOR_OPS.get(type(node.op), "")
        name = name.rstrip("_") if not name.startswith("_") else name  # in-place variants are the op
        if name and name not in NEUTRAL_OPS and not name.startswith("_"):
            ops.add(OP_ALIASES.get(name, name).lower())
    return ops


def reference_operations(reference_source: str) -> set[str]:
    """Operations of the reference's `Model` class (its __init__ layers and its forward)."""
    try:
        tree = ast.parse(reference_source)
    except SyntaxError:
        return set()
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    return operations(model) if model is not None else set()


def _import_roots(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    return [(node.module or "").split(".")[0]]


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [f"{node.module or ''}.{alias.name}" for alias in node.names]


def _check_node(node: ast.AST) -> GlueFinding | None:
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Try | ast.TryStar):
        return GlueFinding(reasons.GLUE_TRY_EXCEPT, "glue may not catch exceptions (try/except)", line)
    if isinstance(node, ast.Import | ast.ImportFrom):
        roots = _import_roots(node)
        full = _imported_names(node)
        for root, name in zip(roots, full, strict=False):
            if root in THREAD_MODULES or name.startswith("torch.multiprocessing"):
                return GlueFinding(reasons.GLUE_THREADS, f"glue imports `{name}` (threads/processes)", line)
            if root in TIMER_MODULES or ".profiler" in name or name.endswith(".Event"):
                return GlueFinding(reasons.GLUE_TIMER_PATCHING, f"glue imports `{name}` (timers)", line)
            if root in IO_MODULES:
                return GlueFinding(
                    reasons.GLUE_IO, f"glue imports `{name}` (files, network, processes)", line
                )
            if root in {"importlib", "builtins", "inspect", "gc"}:
                return GlueFinding(reasons.GLUE_DYNAMIC_CODE, f"glue imports `{name}`", line)
            if root in {"kf_reference", "reference"}:
                return GlueFinding(
                    reasons.GLUE_REFERENCE_FALLBACK, f"glue imports the reference (`{name}`)", line
                )
        return None
    if isinstance(node, ast.ClassDef):
        for base in node.bases:
            base_name = _dotted(base)
            if base_name.endswith("Tensor"):
                return GlueFinding(
                    reasons.GLUE_LAZY_TENSOR, f"class `{node.name}` subclasses `{base_name}`", line
                )
            if base_name == "Model":
                return GlueFinding(
                    reasons.GLUE_REFERENCE_FALLBACK,
                    f"class `{node.name}` subclasses the reference `Model`",
                    line,
                )
        return None
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in LAZY_NAMES:
        return GlueFinding(reasons.GLUE_LAZY_TENSOR, f"glue defines `{node.name}`", line)
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        for target in targets:
            name = _dotted(target)
            root = name.split(".")[0]
            if isinstance(target, ast.Attribute) and root in {"torch", "time", "kf", "F", "nn", "np", "math"}:
                return GlueFinding(
                    reasons.GLUE_TIMER_PATCHING, f"glue assigns to library attribute `{name}`", line
                )
        return None
    if isinstance(node, ast.Attribute | ast.Name):
        name = node.attr if isinstance(node, ast.Attribute) else node.id
        dotted = _dotted(node)
        if name in LAZY_NAMES:
            return GlueFinding(reasons.GLUE_LAZY_TENSOR, f"glue uses `{dotted}`", line)
        if dotted in {"Model", "kf_reference"} or (isinstance(node, ast.Name) and node.id == "Model"):
            return GlueFinding(reasons.GLUE_REFERENCE_FALLBACK, "glue refers to the reference `Model`", line)
        if name in TIMER_NAMES and (
            dotted.startswith(("torch.cuda", "time", "torch.profiler")) or name == "Event"
        ):
            return GlueFinding(reasons.GLUE_TIMER_PATCHING, f"glue touches timing (`{dotted}`)", line)
        if dotted.startswith(("torch.multiprocessing", "torch.distributed")):
            return GlueFinding(reasons.GLUE_THREADS, f"glue uses `{dotted}`", line)
        if dotted.startswith(
            (
                "torch.compile",
                "torch._dynamo",
                "torch.jit",
                "torch.hub",
                "torch.load",
                "torch.save",
                "torch.ops.load_library",
                "torch.utils.cpp_extension",
            )
        ):
            return GlueFinding(reasons.GLUE_IO, f"glue uses `{dotted}` (loads or builds code)", line)
        return None
    if isinstance(node, ast.Call):
        func = _dotted(node.func)
        last = func.rsplit(".", 1)[-1]
        if isinstance(node.func, ast.Name) and func in IO_CALLS:
            return GlueFinding(reasons.GLUE_IO, f"glue calls `{func}()`", line)
        if isinstance(node.func, ast.Name) and func in DYNAMIC_CALLS:
            return GlueFinding(reasons.GLUE_DYNAMIC_CODE, f"glue calls `{func}()`", line)
        if isinstance(node.func, ast.Attribute) and last in IO_METHODS:
            return GlueFinding(reasons.GLUE_IO, f"glue calls `{func}()`", line)
    return None


def check_glue(glue: str, reference_source: str) -> list[GlueFinding]:
    """Every finding, first by line; empty means the glue may run."""
    try:
        tree = ast.parse(glue)
    except SyntaxError as exc:
        return [GlueFinding(reasons.GLUE_SYNTAX_ERROR, f"glue does not parse: {exc.msg}", exc.lineno or 0)]
    findings = [f for node in ast.walk(tree) if (f := _check_node(node)) is not None]
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        findings.append(GlueFinding(reasons.GLUE_MISSING_MODEL_NEW, "glue defines no class `ModelNew`", 0))
    launches = any(isinstance(n, ast.Call) and _dotted(n.func) == "kf.launch" for n in ast.walk(tree))
    if not launches:
        findings.append(GlueFinding(reasons.GLUE_NO_KERNEL_LAUNCH, "glue never calls `kf.launch(...)`", 0))
    model_new = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    ref_ops = reference_operations(reference_source)
    if model_new is not None and ref_ops:
        glue_ops = operations(model_new)
        if ref_ops <= glue_ops:
            findings.append(
                GlueFinding(
                    reasons.GLUE_REFERENCE_FALLBACK,
                    f"glue performs every operation of the reference itself ({', '.join(sorted(ref_ops))})",
                    model_new.lineno,
                )
            )
    return sorted(findings, key=lambda f: f.line)
