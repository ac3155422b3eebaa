"""Judging one output against the high-precision reference: tolerance policy, poisoning, comparisons.

Tolerance policy (KernelBench's current defaults): float32/float64 atol = rtol = 1e-4, float16/bfloat16
1e-2, integers and bools exact; a task's tolerance replaces the policy, and a settings override replaces
both. Whatever the source, the absolute tolerance is never below twice the error that eager PyTorch, in
the task's dtype on the same device, makes against the same reference: a candidate is never rejected
for matching what eager achieves. An element passes when |out - ref| <= atol + rtol * |ref|.

Scale: KernelBench's tolerance assumes outputs of magnitude about 1; an output whose values are all far
below atol (softmax over 393,216 columns: every value < 1e-5) would pass it with zeros or with
bfloat16 arithmetic. So a second, scale-aware test applies too: the largest error may not exceed
SCALE_FACTOR * rtol * scale, where scale = max |ref| (or twice eager's own largest error, if larger:
a correct kernel is never asked to beat eager). For outputs of magnitude >= 1 it is looser than the
elementwise test and changes nothing; for small outputs it makes the comparison relative. The report's
max_rel_error is max |out - ref| / scale.

Memory: every comparison works through its outputs in flat slices of CHUNK_ELEMENTS, so its float64
temporaries stay near 2 GB whatever the output's size (a KernelBench LeakyReLU output of 1.6G elements
needed four 12.9 GB temporaries at once and ran the H200's judge out of memory). An output of one slice
is compared exactly as a whole; over several, the figures combine (counts and maxima exactly, the
standard deviations of the degenerate-output test by Chan's pairwise formula).

Functions here take torch tensors but never call a unit; they run in the evaluation child.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernelfoundry.tasks.model import Tolerance

HALF_TOLERANCE = Tolerance(atol=1e-2, rtol=1e-2)
FLOAT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)
EXACT = Tolerance(atol=0.0, rtol=0.0)
DEGENERATE_STD_RATIO = 1e-3
SCALE_FACTOR = 3.0
# Variation of the reference below this many units of the output dtype's resolution at the output's
# scale cannot be represented by a correct output either: no degenerate-output verdict there.
RESOLVABLE_ULPS = 16.0
CHUNK_ELEMENTS = 1 << 26  # 512 MB per float64 temporary
# passes_by_proxy: the share of atol a proxy reference's own measured error may take, and how much larger
# than in the trials its error on fresh values is allowed for
PROXY_ERROR_SHARE = 0.125
PROXY_ERROR_MARGIN = 2.0
# passes_by_proxy in float32: each rounding is within 2^-24 of the exact value; the bound is shrunk and
# the largest difference grown by this much, more than the few roundings any figure passes through
PROXY_ROUNDING_GUARD = 2.0**-20


def default_tolerance(dtype: Any) -> Tolerance:
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return HALF_TOLERANCE
    if dtype.is_floating_point:
        return FLOAT_TOLERANCE
    return EXACT


def effective_tolerance(
    dtype: Any, eager_abs_error: float, task: Tolerance | None, override: Tolerance | None
) -> tuple[Tolerance, str]:
    """The tolerance to judge by and a phrase saying where it came from."""
    base, source = default_tolerance(dtype), "dtype policy"
    if task is not None:
        base, source = task, "task"
    if override is not None:
        base, source = override, "settings"
    floor = 2.0 * eager_abs_error
    if floor > base.atol:
        return Tolerance(atol=floor, rtol=base.rtol), f"{source}, atol raised to 2x eager's own error"
    return base, source


def poison_(tensor: Any) -> None:
    """Fill with a value a correct unit never leaves behind: NaN for floats, the max value for ints."""
    import torch

    with torch.no_grad():
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            tensor.fill_(float("nan"))
        elif tensor.dtype == torch.bool:
            tensor.fill_(True)
        else:
            tensor.fill_(torch.iinfo(tensor.dtype).max)


def unwritten_mask(out: Any, ref: Any) -> Any:
    """Elements still holding the poison where the reference holds something else."""
    import torch

    if out.dtype.is_floating_point:
        return torch.isnan(out) & ~torch.isnan(ref)
    if out.dtype == torch.bool:
        return torch.zeros_like(out, dtype=torch.bool)
    sentinel = torch.iinfo(out.dtype).max
    return (out == sentinel) & (ref != sentinel)


@dataclass(frozen=True)
class Unwritten:
    count: int  # elements still holding the poison where the reference holds something else
    first: tuple[int, ...]  # the first one's index (() when none, or for a 0-d output)


def unwritten(out: Any, ref: Any) -> Unwritten:
    """`unwritten_mask`'s count and first index, slice by slice: a whole-output mask of level1/19's 6.4
    GB output is three 1.6 GB bool temporaries at once, which ran an 80 GB card's judge out of memory
    beside the sets it holds (bench/results/h100_2026-12-06f/)."""
    count, first = 0, -1
    for start, got, want in _slices(out, ref):
        mask = unwritten_mask(got, want)
        found = int(mask.sum().item())
        if found and first < 0:
            first = start + int(mask.nonzero()[0][0].item())
        count += found
    if first < 0 or out.dim() == 0:
        return Unwritten(count, ())
    index: list[int] = []
    for size in reversed(tuple(out.shape)):
        first, at = divmod(first, size)
        index.append(at)
    return Unwritten(count, tuple(reversed(index)))


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_error: float
    max_rel_error: float  # max |out - ref| / the output's scale
    mismatches: int
    numel: int
    worst_index: tuple[int, ...]
    worst_value: float
    worst_expected: float
    scale: float = 0.0
    scale_ok: bool = True

    def describe(self, tolerance: Tolerance) -> str:
        text = (
            f"{self.mismatches} of {self.numel} elements outside atol={tolerance.atol:.3g}, "
            f"rtol={tolerance.rtol:.3g}; max abs error {self.max_abs_error:.3g}, worst at index "
            f"{list(self.worst_index)}: got {self.worst_value:.6g}, expected {self.worst_expected:.6g}"
        )
        if not self.scale_ok:
            text += (
                f"; max error {self.max_rel_error:.3g} of the output's scale {self.scale:.3g} is over "
                f"{SCALE_FACTOR:g} x rtol = {SCALE_FACTOR * tolerance.rtol:.3g}"
            )
        return text


def _abs_difference(got: Any, want: Any) -> Any:
    """|got - want| in float64; NaN against NaN is 0, NaN against a number is inf."""
    import torch

    diff = torch.sub(got, want).abs_()
    diff.masked_fill_(torch.isnan(got).logical_and_(torch.isnan(want)), 0.0)
    return diff.nan_to_num_(nan=float("inf"), posinf=float("inf"))


def _slices(out: Any, ref: Any) -> Any:
    """(offset, out slice, ref slice) over the flattened tensors, CHUNK_ELEMENTS at a time."""
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)
    for start in range(0, flat_out.numel(), CHUNK_ELEMENTS):
        end = start + CHUNK_ELEMENTS
        yield start, flat_out[start:end], flat_ref[start:end]


def max_abs_error(out: Any, ref: Any) -> float:
    """`compare(out, ref, ...).max_abs_error` without the rest of the comparison's passes."""
    import torch

    worst = 0.0
    for _, got, want in _slices(out, ref):
        got64 = got.to(torch.float64)
        worst = max(
            worst, float(_abs_difference(got64, want.to(device=got64.device, dtype=torch.float64)).max())
        )
    return worst


def proxy_can_decide(tolerance: Tolerance, proxy_error: float) -> bool:
    """Whether a proxy reference of this measured error may decide anything at this tolerance (its error
    finite and at most PROXY_ERROR_SHARE of atol): checked before computing a proxy at all."""
    return math.isfinite(proxy_error) and proxy_error <= PROXY_ERROR_SHARE * tolerance.atol


def passes_by_proxy(
    out: Any, proxy: Any, tolerance: Tolerance, proxy_error: float, error_floor: float = 0.0
) -> bool:
    """Whether `out` certainly passes `compare` against the high-precision reference, judged against a
    cheaper reference `proxy` (the task's model in its own dtype on the device, TF32 off) whose largest
    error against the high-precision reference in the trials was `proxy_error`.

    With e = PROXY_ERROR_MARGIN * proxy_error (the proxy's error allowed to grow that much on fresh
    values): |out - ref| <= |out - proxy| + e and |ref| >= |proxy| - e, so
    |out - proxy| <= atol + rtol * |proxy| - e * (1 + rtol) everywhere implies the elementwise test, and
    max |out - proxy| + e <= max(SCALE_FACTOR * rtol * (max |proxy| - e), error_floor) the scale test
    (`error_floor`: twice eager's own largest error, as `compare` is given it; without it every checked
    call of a TF32 conv, whose errors pass that floor and not 3 x rtol x scale, went to the float64
    reference: 2.8 s a check on a 3-D transposed conv on the H200). The proxy may use
    at most PROXY_ERROR_SHARE of atol, so the margin stays a small part of the bound. False means
    undecided, never wrong: NaN or inf anywhere (a poisoned, unwritten element among them: the
    high-precision comparison names it), an integer output, a near miss, or a proxy too coarse for the
    tolerance; the caller compares against the high-precision reference then.

    Two float32 tensors are compared in float32 (a third of float64's traffic on outputs of gigabytes,
    no conversions): each float32 operation's rounding is within ROUNDING of the exact value, so the
    elementwise bound is shrunk and the largest difference grown by PROXY_ROUNDING_GUARD, which covers
    the few roundings each passes through (a pass here is a pass in exact arithmetic). One device
    synchronisation a slice."""
    import torch

    if not out.dtype.is_floating_point or not proxy_can_decide(tolerance, proxy_error):
        return False
    if out.numel() == 0:
        return True
    margin = PROXY_ERROR_MARGIN * proxy_error
    slack = tolerance.atol - margin * (1.0 + tolerance.rtol)
    narrow = out.dtype == torch.float32 and proxy.dtype == torch.float32
    guard = PROXY_ROUNDING_GUARD if narrow else 0.0
    work = torch.float32 if narrow else torch.float64
    if slack <= 0.0:
        return False
    worst, output_scale = 0.0, 0.0
    for _, part, part_proxy in _slices(out, proxy):
        got = part.to(work)
        want = part_proxy.to(device=got.device, dtype=work)
        diff = torch.sub(got, want).abs_()
        scale = want.abs()  # not in place: in float32 `want` may be the proxy itself, which is kept
        largest, widest = diff.max(), scale.max()
        bound = torch.mul(scale, tolerance.rtol * (1.0 - guard)).add_(slack * (1.0 - guard))
        # `le` is False where either side is NaN: a NaN or inf in out or proxy leaves it undecided
        within = diff.le_(bound).all()
        figures = torch.stack((within.to(work), largest, widest))
        ok, part_worst, part_scale = (float(v) for v in figures.tolist())
        if not ok or not math.isfinite(part_worst) or not math.isfinite(part_scale):
            return False
        worst = max(worst, part_worst * (1.0 + guard))
        output_scale = max(output_scale, part_scale)
    allowed = max(SCALE_FACTOR * tolerance.rtol * max(output_scale - margin, 0.0), error_floor)
    return worst + margin <= allowed * (1.0 - guard)


def compare(out: Any, ref: Any, tolerance: Tolerance, error_floor: float = 0.0) -> Comparison:
    """Compare `out` (any dtype) with `ref` (high precision) elementwise and against the output's scale
    (see the module docstring); NaN matches only NaN. `error_floor`: twice eager's own largest error.

    Works in place on its float64 temporaries: on the CPU each fresh temporary of a large output is
    page-faulted in, and the comparison of an 8M-element output took half a second with one per step.
    """
    import torch

    numel = out.numel()
    if numel == 0:
        return Comparison(True, 0.0, 0.0, 0, 0, (), 0.0, 0.0)
    mismatches, worst, output_scale = 0, 0.0, 0.0
    flat, largest_excess = 0, -math.inf
    for start, part, part_ref in _slices(out, ref):
        got = part.to(torch.float64)
        want = part_ref.to(device=got.device, dtype=torch.float64)
        diff = _abs_difference(got, want)
        scale = want.abs().nan_to_num_(0.0)  # |expected|, NaN as 0
        excess = torch.mul(scale, tolerance.rtol).add_(tolerance.atol).neg_().add_(diff)  # diff - bound
        mismatches += int(excess.gt(0.0).sum().item())
        at = int(torch.argmax(excess).item())
        value = float(excess[at].item())
        # torch.argmax over the whole: the first largest, NaN above everything
        if (math.isnan(value) and not math.isnan(largest_excess)) or value > largest_excess:
            flat, largest_excess = start + at, value
        del excess
        output_scale = max(output_scale, float(scale.masked_fill_(torch.isinf(scale), 0.0).max().item()))
        worst = max(worst, float(diff.max().item()))
    scale_ok = worst <= max(SCALE_FACTOR * tolerance.rtol * output_scale, error_floor)
    index = (
        tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(out.shape))) if out.dim() else ()
    )
    return Comparison(
        ok=mismatches == 0 and scale_ok,
        max_abs_error=worst,
        max_rel_error=worst / output_scale if output_scale > 0 else (0.0 if worst == 0 else math.inf),
        mismatches=mismatches,
        numel=numel,
        worst_index=index,
        worst_value=float(out.detach().reshape(-1)[flat].to(torch.float64).item()),
        worst_expected=float(ref.detach().reshape(-1)[flat].to(torch.float64).item()),
        scale=output_scale,
        scale_ok=scale_ok,
    )


@dataclass
class _Spread:
    """Count, mean and sum of squared deviations, combined slice by slice (Chan et al.)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, values: Any) -> None:
        n = values.numel()
        if n == 0:
            return
        mean = float(values.mean().item())
        m2 = float((values - mean).square_().sum().item())
        total = self.count + n
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    def std(self) -> float:
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else math.nan


def is_degenerate(out: Any, ref: Any, noise_floor: float = 0.0) -> bool:
    """Near-constant output (zeros included) where the reference varies by more than the output's
    dtype can resolve at the output's scale (scale-aware: a correct output is never degenerate), and by
    more than `noise_floor`: the error eager itself makes in the task's dtype (twice it). A reference
    whose whole variation is below what eager can compute is rounding noise, not a signal a kernel could
    be asked to reproduce (a group norm over one element: float64 leaves 1e-14 where the answer is 0)."""
    import torch

    if out.numel() < 2 or not out.dtype.is_floating_point:
        return False
    if out.numel() > CHUNK_ELEMENTS:
        return _is_degenerate_by_slices(out, ref, noise_floor)
    want = ref.detach().to(torch.float64)
    finite_mask = torch.isfinite(want)
    # The usual reference is finite everywhere: no masked copy of a large output then.
    finite = want.reshape(-1) if bool(finite_mask.all().item()) else want[finite_mask]
    if finite.numel() < 2:
        return False
    got = out.detach().to(torch.float64).nan_to_num(0.0)
    ref_std = float(finite.std().item())
    resolution = torch.finfo(out.dtype).eps * float(finite.abs().max().item())
    if not ref_std > max(RESOLVABLE_ULPS * resolution, noise_floor):
        return False
    return float(got.std().item()) <= DEGENERATE_STD_RATIO * ref_std


def _is_degenerate_by_slices(out: Any, ref: Any, noise_floor: float) -> bool:
    """is_degenerate for an output of several slices: the same test on combined statistics."""
    import torch

    reference, output = _Spread(), _Spread()
    largest = 0.0
    for _, part, part_ref in _slices(out, ref):
        want = part_ref.to(torch.float64)
        finite = want[torch.isfinite(want)]
        reference.add(finite)
        if finite.numel():
            largest = max(largest, float(finite.abs().max().item()))
        output.add(part.to(torch.float64).nan_to_num(0.0))
    if reference.count < 2:
        return False
    ref_std = reference.std()
    resolution = torch.finfo(out.dtype).eps * largest
    if not ref_std > max(RESOLVABLE_ULPS * resolution, noise_floor):
        return False
    return output.std() <= DEGENERATE_STD_RATIO * ref_std


def is_half_precision_level(out: Any, ref: Any, dtype: Any) -> bool:
    """A float32/float64 result that would pass only at float16/bfloat16 tolerance."""
    import torch

    if dtype not in (torch.float32, torch.float64):
        return False
    return compare(out, ref, HALF_TOLERANCE).ok


def bitwise_equal(a: Any, b: Any) -> bool:
    """Same bytes (NaNs with the same payload compare equal). Slice by slice: torch.equal over a whole
    tensor allocates a bool per byte compared (16 GiB for level1/45_Average_Pooling_2D's 17 GB input,
    beside the two draws it compared, when the judge ran out of memory on the H200). `b` may live on
    another device: each of its slices is copied to `a`'s in turn, never the whole."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    flat_a = a.contiguous().reshape(-1).view(torch.uint8)
    flat_b = b.contiguous().reshape(-1).view(torch.uint8)
    step = 8 * CHUNK_ELEMENTS  # bytes: the same bool temporary as a float64 slice of the comparisons
    return all(
        torch.equal(flat_a[start : start + step], flat_b[start : start + step].to(flat_a.device))
        for start in range(0, flat_a.numel(), step)
    )


def content_digest(value: Any) -> int:
    """A cheap fingerprint of a tensor's bytes, computed where the tensor lives (one pass on the
    device): the judge and the runner compare their independently drawn inputs with it. Not a
    security boundary (the trials compare outputs with the judge's own reference); it tells an honest
    difference of draws from a match before any call is made."""
    total = odd = 0
    for slice_total, slice_odd in digest_sums(value).tolist():  # one synchronisation
        total += slice_total
        odd += slice_odd
    return (total * 1_000_003 + odd) % (1 << 62)


def digest_sums(value: Any) -> Any:
    """content_digest's partial sums, left where the tensor lives and queued on the current stream
    (nothing waits for them): an int64 tensor of (sum of words, sum of odd words) per slice. Two of
    them are equal exactly where the tensors' digests are, slice by slice."""
    import torch

    raw = value.detach().contiguous().reshape(-1).view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    # slice by slice (an even number of words each, so a slice's odd words are the whole's): a sum to
    # int64 over a whole 6.4 GB input may widen it first, 12.9 GB that the runner's allocator then kept
    # cached beside the judge's sets (level1/19_ReLU's judge out of memory on an 80 GB card)
    step = CHUNK_ELEMENTS + CHUNK_ELEMENTS % 2
    sums = [
        torch.stack([part.sum(dtype=torch.int64), part[1::2].sum(dtype=torch.int64)])
        for part in (words[start : start + step] for start in range(0, words.numel(), step))
    ]
    return torch.stack(sums) if sums else torch.zeros((0, 2), dtype=torch.int64, device=raw.device)
