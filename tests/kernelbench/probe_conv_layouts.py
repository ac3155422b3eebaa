"""A probe, not a test: where torch.compile's lead on KernelBench's level-2 conv tasks comes from.

    python3 tests/kernelbench/probe_conv_layouts.py [STEM ...]

For each task (../shared/kernelbench or $KF_KERNELBENCH, level 2, at KernelBench's sizes), the median of
20 calls (CUDA events, 3 warm-ups, no cache flush: an indication, not the evaluator's figure) of: the
eager model; torch.compile of it; its conv alone in NCHW with and without the bias; the conv on
channels-last input and weight (converted beforehand) with and without the bias; the two layout
conversions; and the conv kernels each of eager and compile launch (torch.profiler), to tell a layout
from an algorithm or a fused bias.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

KB = Path(os.environ.get("KF_KERNELBENCH", Path(__file__).resolve().parents[3] / "shared" / "kernelbench"))
DEFAULT = [
    "25_Conv2d_Min_Tanh_Tanh",
    "35_Conv2d_Subtract_HardSwish_MaxPool_Mish",
    "5_ConvTranspose2d_Subtract_Tanh",
]


def ms(fn: Any) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def kernels(fn: Any) -> list[str]:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / 1000) for e in prof.key_averages()]
    return [f"{name[:90]} {t:.3f} ms" for name, t in sorted(rows, key=lambda r: -r[1])[:6]]


def probe(stem: str) -> None:
    path = KB / "level2" / f"{stem}.py"
    scope: dict[str, Any] = {"__name__": stem}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    torch.manual_seed(0)
    model = scope["Model"](*scope["get_init_inputs"]()).cuda().eval()
    x = scope["get_inputs"]()[0].cuda()
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
    transposed = isinstance(conv, torch.nn.modules.conv._ConvTransposeNd)
    fn = F.conv_transpose2d if transposed else F.conv2d
    kw: dict[str, Any] = {"stride": conv.stride, "padding": conv.padding, "dilation": conv.dilation}
    if transposed:
        kw["output_padding"] = conv.output_padding
    w, b = conv.weight.detach(), conv.bias.detach() if conv.bias is not None else None
    x_cl, w_cl = (
        x.contiguous(memory_format=torch.channels_last),
        w.contiguous(memory_format=torch.channels_last),
    )
    y = fn(x, w, b, **kw)
    y_cl = fn(x_cl, w_cl, b, **kw)
    compiled = torch.compile(model)
    with torch.no_grad():
        rows = {
            "eager model": ms(lambda: model(x)),
            "compiled model": ms(lambda: compiled(x)),
            "conv NCHW + bias": ms(lambda: fn(x, w, b, **kw)),
            "conv NCHW, no bias": ms(lambda: fn(x, w, None, **kw)),
            "conv NHWC + bias": ms(lambda: fn(x_cl, w_cl, b, **kw)),
            "conv NHWC, no bias": ms(lambda: fn(x_cl, w_cl, None, **kw)),
            "x to NHWC": ms(lambda: x.contiguous(memory_format=torch.channels_last)),
            "y NHWC to NCHW": ms(lambda: y_cl.contiguous()),
        }
        print(f"== {stem}: x {tuple(x.shape)}, y {tuple(y.shape)}, tf32 {torch.backends.cudnn.allow_tf32}")
        for name, t in rows.items():
            print(f"  {name:22s} {t:8.3f} ms")
        print("  eager kernels:", *kernels(lambda: model(x)), sep="\n    ")
        print("  compiled kernels:", *kernels(lambda: compiled(x)), sep="\n    ")


if __name__ == "__main__":
    for stem in sys.argv[1:] or DEFAULT:
        probe(stem)
