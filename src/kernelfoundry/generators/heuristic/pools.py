"""Pooling windows fused with the pointwise ops around them (the CUDA emitter's `pool` steps).

A conv tail such as `conv -> x - 0.5 -> hardswish -> MaxPool2d(2) -> mish` (KernelBench level2/35) ran
as the library conv, a kernel for the pointwise head, torch's pooling and a kernel for the pointwise
tail: the conv's output (1 GB there) went through memory four times. `fuse_pools` marks each fixed-window
max or average pooling module (not adaptive, no `ceil_mode`, no indices) whose input or output meets a
generated op as a generated node of kind `pool`: the planner (plan.py) then evaluates the pointwise ops
that produce its input at every window tap, in registers, and the pointwise ops that consume its output
while writing it, so the conv's output is read once and only the pooled values are written.

The window's geometry comes from the op kernels' reading of the module (opkernels.op_kernel), the one
home of those settings. `window_taps` is the window's C loop nest the CUDA (cuda_pools.py, layout.py)
and C++ (cpu.py) pool steps share. Pure graph rewriting and string building; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, Shape
from kernelfoundry.generators.heuristic.opkernels import op_kernel
from kernelfoundry.generators.heuristic.plan import Step, row_lead


@dataclass(frozen=True)
class PoolWindow:
    """A fixed pooling window over the last `dims` dims, each setting as (d, h, w) with 1 (0 for the
    padding) in front of a 1-D or 2-D window's."""

    dims: int
    is_max: bool
    window: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    include_pad: bool = True  # an average's divisor counts the padded taps (PyTorch's count_include_pad)
    divisor: int = 0  # an average's divisor_override, 0 for none

    def _reach(self, axis: int) -> int:
        """What PyTorch's pooled-length rule adds to the input's length before dividing by the stride."""
        k, p, d = self.window[axis], self.padding[axis], self.dilation[axis]
        return 2 * p - d * (k - 1) - 1

    def out_len(self, n: int, axis: int) -> int:
        """The output's length along spatial axis `axis` (0..2 of (d, h, w)) for an input length `n`."""
        return (n + self._reach(axis)) // self.stride[axis] + 1

    def out_len_c(self, n: str, axis: int) -> tuple[str, str]:
        """out_len in C for the length expression `n`: (the test that the window does not fit, the
        output's length)."""
        span = f"{n} + {self._reach(axis)}"
        return f"{span} < 0", f"({span}) / {self.stride[axis]} + 1"

    def out_shape(self, shape: Shape) -> Shape:
        lead = len(shape) - self.dims
        spatial = [self.out_len(n, 3 - self.dims + i) for i, n in enumerate(shape[lead:])]
        return (*shape[:lead], *spatial)


def pool_window(node: OpNode) -> PoolWindow | None:
    """The window of a `pool` node (fuse_pools set it), None for any other node."""
    window = node.attrs.get("pool_window") if node.kind == "pool" else None
    return window if isinstance(window, PoolWindow) else None


class PoolStep(NamedTuple):
    """What a pool step's emitters read: its window, input, the input's and output's shapes and how
    many leading dims index its (image, channel) planes."""

    window: PoolWindow
    src: Ref
    xshape: Shape
    oshape: Shape
    lead: int


def pool_step(graph: Graph, step: Step) -> PoolStep:
    window = pool_window(step.root)
    src = step.root.args[0]
    assert window is not None and isinstance(src, Ref)
    xshape = tuple(graph.shapes[src.name])
    return PoolStep(window, src, xshape, tuple(graph.shapes[step.root.name]), row_lead(step.root, xshape))


def _window_of(graph: Graph, node: OpNode) -> PoolWindow | None:
    kernel = op_kernel(graph, node) if node.kind == "pooling" else None
    if kernel is None or kernel.family != "pool" or kernel.params["adaptive"]:
        return None
    p = kernel.params
    return PoolWindow(
        dims=int(p["dims"]),
        is_max=bool(p["max"]),
        window=tuple(p["window"]),
        stride=tuple(p["stride"]),
        padding=tuple(p["padding"]),
        dilation=tuple(p["dilation"]),
        include_pad=bool(p["include_pad"]),
        divisor=int(p["divisor"]),
    )


def fuse_pools(graph: Graph) -> Graph:
    """The graph with every fusable pooling node (see the module's doc) of kind `pool`: a batched input
    (rank dims + 2), a window that fits the input, and a generated op on one side (a pooling between
    two library ops gains nothing from being generated: the op kernels serve those)."""
    nodes = list(graph.nodes)
    by_name = {n.name: n for n in nodes}
    changed = False
    for i, n in enumerate(nodes):
        window = _window_of(graph, n)
        src = n.args[0] if n.args else None
        if window is None or not isinstance(src, Ref) or src.trail:
            continue
        shape = tuple(graph.shapes[src.name])
        if len(shape) != window.dims + 2 or src.name in graph.opaque:
            continue
        if window.out_shape(shape) != tuple(n.shape) or any(d <= 0 for d in n.shape):
            continue
        producer = by_name.get(src.name)
        generated_in = producer is not None and producer.kind not in KEPT_IN_TORCH
        generated_out = any(u.kind not in KEPT_IN_TORCH for u in graph.users(n.name))
        if not (generated_in or generated_out):
            continue
        nodes[i] = by_name[n.name] = replace(n, kind="pool", attrs={**n.attrs, "pool_window": window})
        changed = True
    return replace(graph, nodes=nodes) if changed else graph


def inside(window: PoolWindow) -> bool:
    """Whether every window lies inside the input (no padding; no ceil mode is taken): its taps need
    no bounds checks and an average divides by the window's size."""
    return not any(window.padding)


def pool_accumulate(window: PoolWindow, value: str) -> tuple[str, str, str]:
    """(the accumulator's initial value, the statement adding the tap `value` to `acc`, the statement
    finishing `acc` after the window): a max that keeps NaNs (as PyTorch's), or a sum divided as
    PyTorch divides an average. The divisor reads the window's start (d0, h0, w0), the input's sizes
    (ID, IH, IW) and the in-bounds taps counted in `cnt`, unless every window lies inside."""
    if window.is_max:
        return "-INFINITY", f"acc = ({value} > acc || {value} != {value}) ? {value} : acc;", ""
    kd, kh, kw = window.window
    pd, ph, pw = window.padding
    if window.divisor:
        divisor = f"{float(window.divisor)!r}f"
    elif inside(window):
        divisor = f"{float(kd * kh * kw)!r}f"
    elif window.include_pad:
        # PyTorch: the window clipped to the padded input, before clipping to the input (average
        # pools have no dilation)
        divisor = (
            f"(float)((kf_imin(d0 + {kd}, ID + {pd}) - d0) * (kf_imin(h0 + {kh}, IH + {ph}) - h0)"
            f" * (kf_imin(w0 + {kw}, IW + {pw}) - w0))"
        )
    else:
        divisor = "(float)(cnt > 0 ? cnt : 1)"
    count = "" if inside(window) else " ++cnt;"
    return "0.0f", f"acc += {value};{count}", f"acc = acc / {divisor};"


def window_taps(
    window: PoolWindow, tap: list[str], value: str, indent: str, unroll: bool, index: str = "int"
) -> list[str]:
    """C statements pooling one output at (od, oh, ow) (in scope, with the input's sizes ID, IH, IW)
    into `acc`: the window's start (d0, h0, w0), then for each in-bounds tap its input position `at`
    within the (image, channel) plane, the `tap` statements and the tap's `value` combined, then an
    average's division. The geometry is baked in (`unroll`: CUDA's pragmas over the fixed loops); a
    window that lies inside the input checks no bounds (a loop over outputs vectorises); positions in
    `index` arithmetic."""
    kd, kh, kw = window.window
    sd, sh, sw = window.stride
    pd, ph, pw = window.padding
    dd, dh, dw = window.dilation
    neutral, combine, finish = pool_accumulate(window, "tap")
    pragma = ["#pragma unroll"] if unroll else []
    checks = ("", "", "")
    if not inside(window):
        checks = (
            "  if (d < 0 || d >= ID) continue;",
            "    if (h < 0 || h >= IH) continue;",
            "      if (w < 0 || w >= IW) continue;",
        )
    count = [] if inside(window) else ["int cnt = 0;", "(void)cnt;"]
    body = [
        f"const {index} d0 = od * {sd} - {pd}, h0 = oh * {sh} - {ph}, w0 = ow * {sw} - {pw};",
        f"float acc = {neutral};",
        *count,
        *pragma,
        f"for (int a = 0; a < {kd}; ++a) {{",
        f"  const {index} d = d0 + a * {dd};",
        *checks[:1],
        *["  " + p for p in pragma],
        f"  for (int b = 0; b < {kh}; ++b) {{",
        f"    const {index} h = h0 + b * {dh};",
        *checks[1:2],
        *["    " + p for p in pragma],
        f"    for (int k = 0; k < {kw}; ++k) {{",
        f"      const {index} w = w0 + k * {dw};",
        *checks[2:],
        "      const int64_t at = ((int64_t)d * IH + h) * IW + w;",
        *[line.removeprefix(indent) for line in tap],
        f"      const float tap = {value};",
        f"      {combine}",
        "    }",
        "  }",
        "}",
        *([finish] if finish else []),
    ]
    return [indent + line for line in body if line]
