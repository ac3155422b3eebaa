"""The entry-point skeleton shared by the C++ and CUDA emitters.

Checks counts, dtypes, contiguity and shapes (KF_ERR_BAD_ARGUMENTS on mismatch), computes every value's
shape at run time from the descriptors (so one unit serves every shape of the task), binds data
pointers, allocates intermediates, runs the steps and frees. Pure string building.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelfoundry.generators.heuristic.graph import Graph, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import Part, Step, reduce_range
from kernelfoundry.generators.heuristic.pools import PoolWindow


def ptr(name: str) -> str:
    return f"L_{name}"


def shp(name: str) -> str:
    return f"s_{name}"


def entry_point(
    graph: Graph,
    part: Part,
    step_code: Callable[[Step], list[str]],
    alloc: Callable[[str, str], str],
    free: Callable[[str], str],
) -> list[str]:
    out: list[str] = []
    w = out.append
    w(f"KF_EXPORT int {part.entry_point}(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,")
    w("                              int32_t n_outputs, void* stream) {")
    w(
        f"  if (n_inputs != {len(part.inputs)} || n_outputs != {len(part.outputs)})"
        " return KF_ERR_BAD_ARGUMENTS;"
    )
    for i, name in enumerate(part.inputs):
        if name in graph.opaque:
            continue  # an integer buffer (BatchNorm's num_batches_tracked) the kernel never reads
        w(f"  kf_shape {shp(name)};")
        w(
            f"  if (!kf_tensor_ok(&inputs[{i}]) || !kf_shape_of(&inputs[{i}], &{shp(name)}))"
            " return KF_ERR_BAD_ARGUMENTS;"
        )
        w(f"  const float* {ptr(name)} = KF_DATA(const float, &inputs[{i}]);")
    for n in part.nodes:
        rank = len(n.shape)
        if n.kind == "pointwise":
            refs = [a for a in n.args if isinstance(a, Ref)]
            if not refs:
                raise UnsupportedGraph(f"`{n.name}` has no tensor operand")
            first = refs[0]
            w(f"  kf_shape {shp(n.name)} = kf_trail({shp(first.name)}, {first.trail});")
            for r in refs[1:]:
                w(
                    f"  if (!kf_bcast({shp(n.name)}, kf_trail({shp(r.name)}, {r.trail}), &{shp(n.name)}))"
                    " return KF_ERR_BAD_ARGUMENTS;"
                )
        else:
            src = n.args[0]
            assert isinstance(src, Ref)
            if n.kind == "reduction":
                d0, d1, keep = reduce_range(n, len(graph.shapes[src.name]))
                w(f"  kf_shape {shp(n.name)} = kf_reduce({shp(src.name)}, {d0}, {d1}, {int(keep)});")
            elif n.kind == "pool":
                out.extend(_pooled_shape(n.name, src.name, n.attrs["pool_window"]))
            else:
                w(f"  kf_shape {shp(n.name)} = {shp(src.name)};")
        w(f"  if ({shp(n.name)}.nd != {rank}) return KF_ERR_BAD_ARGUMENTS;")
    for k, name in enumerate(part.outputs):
        w(
            f"  if (!kf_tensor_ok(&outputs[{k}]) || !kf_shape_is(&outputs[{k}], {shp(name)}))"
            " return KF_ERR_BAD_ARGUMENTS;"
        )
        w(f"  float* {ptr(name)} = KF_DATA(float, &outputs[{k}]);")
    temps = [s.out for s in part.steps if s.out not in part.outputs]
    w("  int rc = KF_OK;")
    for name in temps:
        w(f"  float* {ptr(name)} = {alloc(name, f'kf_prod(&{shp(name)}, 0, {shp(name)}.nd)')};")
    if temps:
        w("  if (" + " || ".join(f"!{ptr(t)}" for t in temps) + ") { rc = KF_ERR_LAUNCH; goto kf_done; }")
    for step in part.steps:
        w(f"  {{ /* step: {step.kind} {step.root.op} -> {step.out} */")
        out.extend(step_code(step))
        w("  }")
    w("kf_done:")
    for name in temps:
        w(f"  {free(name)}")
    w("  (void)stream;")
    w("  return rc;")
    w("}")
    return out


def _pooled_shape(name: str, src: str, window: PoolWindow) -> list[str]:
    """A pool's output shape from its input's: each pooled dim's length by PyTorch's rule (no ceil
    mode), a window that does not fit the input refused."""
    lines = [f"  kf_shape {shp(name)} = {shp(src)};"]
    for i in range(window.dims):
        dim = f"{shp(name)}.d[{shp(src)}.nd - {window.dims - i}]"
        unfit, length = window.out_len_c(dim, 3 - window.dims + i)
        lines.append(f"  if ({shp(src)}.nd < {window.dims} || {unfit}) return KF_ERR_BAD_ARGUMENTS;")
        lines.append(f"  {dim} = {length};")
    return lines
