"""comparison.passes_by_proxy: a checked timed call decided on the cheap proxy reference only when the
high-precision comparison would certainly pass too; everything else is left undecided."""

from __future__ import annotations

import math

import pytest
import torch

from kernelfoundry.evaluation import comparison
from kernelfoundry.tasks.model import Tolerance

TOL = Tolerance(atol=1e-4, rtol=1e-4)


def values(n: int = 4096, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_an_output_close_to_an_accurate_proxy_passes() -> None:
    ref = values()
    proxy = ref.to(torch.float32)
    out = (ref + 1e-6).to(torch.float32)
    e = comparison.max_abs_error(proxy, ref)
    assert comparison.passes_by_proxy(out, proxy, TOL, e)


def test_an_output_within_the_bound_less_the_proxy_margin_passes_and_past_it_is_left_to_the_reference() -> (
    None
):
    ref = values()
    proxy = ref.to(torch.float32)
    e = 1e-6  # the proxy's error in the trials: the margin is twice that
    slack = TOL.atol - comparison.PROXY_ERROR_MARGIN * e * (1 + TOL.rtol)
    inside, past = proxy.clone().double(), proxy.clone().double()
    inside[17] += 0.99 * (slack + TOL.rtol * abs(float(proxy[17])))
    past[17] += 1.01 * (slack + TOL.rtol * abs(float(proxy[17])))
    assert comparison.passes_by_proxy(inside, proxy, TOL, e)
    assert not comparison.passes_by_proxy(past, proxy, TOL, e)


def test_the_scale_test_allows_twice_eager_s_own_error_as_the_reference_comparison_does() -> None:
    """A TF32 conv: errors within atol (set from eager's own TF32 error) but above 3 x rtol x the output's
    scale. The high-precision comparison passes it on the error floor (twice eager's error); the proxy
    decides the same where the floor covers its margin too, and leaves it undecided without the floor."""
    ref = values(seed=3)
    proxy = ref.to(torch.float32)
    e = comparison.max_abs_error(proxy, ref)
    tol = Tolerance(atol=4e-3, rtol=1e-4)
    scale = float(ref.abs().max())
    delta = 0.5 * tol.atol  # above 3 x rtol x scale at this scale (about 4)
    assert delta > comparison.SCALE_FACTOR * tol.rtol * scale
    out = (ref + delta * torch.sign(values(seed=4))).to(torch.float32)
    floor = 2.0 * delta
    assert comparison.compare(out, ref, tol, floor).ok and not comparison.compare(out, ref, tol).ok
    assert comparison.passes_by_proxy(out, proxy, tol, e, floor)
    assert not comparison.passes_by_proxy(out, proxy, tol, e)
    # a floor that does not cover the proxy's margin on top of the error decides nothing
    assert not comparison.passes_by_proxy(out, proxy, tol, e, delta)


def test_a_proxy_whose_own_error_takes_more_than_its_share_of_atol_decides_nothing() -> None:
    ref = values()
    proxy = ref.to(torch.float32)
    assert comparison.passes_by_proxy(proxy, proxy, TOL, comparison.PROXY_ERROR_SHARE * TOL.atol)
    assert not comparison.passes_by_proxy(proxy, proxy, TOL, 1.01 * comparison.PROXY_ERROR_SHARE * TOL.atol)
    assert not comparison.passes_by_proxy(proxy, proxy, TOL, math.inf)
    assert not comparison.passes_by_proxy(proxy, proxy, TOL, math.nan)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_in_the_output_or_the_proxy_are_left_to_the_reference(bad: float) -> None:
    proxy = values().to(torch.float32)
    out = proxy.clone()
    out[3] = bad
    assert not comparison.passes_by_proxy(out, proxy, TOL, 0.0)
    assert not comparison.passes_by_proxy(proxy, out, TOL, 0.0)


def test_integer_outputs_are_left_to_the_exact_comparison() -> None:
    ints = torch.arange(10, dtype=torch.int64)
    assert not comparison.passes_by_proxy(ints, ints, Tolerance(0.0, 0.0), 0.0)


def test_small_outputs_keep_the_scale_aware_test() -> None:
    # every value far below atol: zeros pass the elementwise bound, never the scale test
    proxy = (values() * 1e-7).to(torch.float32)
    assert not comparison.passes_by_proxy(torch.zeros_like(proxy), proxy, TOL, 0.0)
    assert comparison.passes_by_proxy(proxy.clone(), proxy, TOL, 0.0)


def test_an_empty_output_passes() -> None:
    empty = torch.empty(0)
    assert comparison.passes_by_proxy(empty, empty, TOL, 0.0)


def test_whatever_passes_by_proxy_passes_the_high_precision_comparison() -> None:
    """Soundness: outputs perturbed at random scales up to past the bounds, a proxy whose error against
    the reference is up to twice what the trials measured: no pass by proxy ever fails `compare`, and
    the proxy does decide most honest outputs."""
    decided, violations = 0, []
    for seed in range(200):
        gen = torch.Generator().manual_seed(seed)
        scale = 10.0 ** float(torch.empty(1).uniform_(-6, 3, generator=gen))
        ref = torch.randn(2048, generator=gen, dtype=torch.float64) * scale
        share = comparison.PROXY_ERROR_SHARE * TOL.atol
        measured = float(torch.empty(1).uniform_(0, 1.5 * share, generator=gen))
        noise = torch.empty(2048, dtype=torch.float64).uniform_(-2 * measured, 2 * measured, generator=gen)
        proxy = (ref + noise).to(torch.float32)
        bound = TOL.atol + TOL.rtol * ref.abs()
        jitter = torch.empty(2048, dtype=torch.float64).uniform_(-1.2, 1.2, generator=gen)
        for candidate in ((ref + bound * jitter).float(), proxy.clone(), (ref + 0.2 * bound).float()):
            if comparison.passes_by_proxy(candidate, proxy, TOL, measured):
                decided += 1
                if not comparison.compare(candidate, ref, TOL).ok:
                    violations.append(seed)
    assert not violations
    assert decided >= 100  # 150 of the 600: the rest past the bound, too small, or the proxy too coarse


def test_float32_outputs_are_compared_in_float32_without_touching_the_proxy() -> None:
    proxy = (values() * 3.0).to(torch.float32)
    kept = proxy.clone()
    out = proxy + 1e-5
    assert comparison.passes_by_proxy(out, proxy, TOL, 0.0)
    assert torch.equal(proxy, kept)  # the kept proxy (a later stale-output check reads it) is intact


def test_float32_rounding_at_the_bound_never_passes_what_the_exact_comparison_fails() -> None:
    """Outputs one float32 step either side of atol + rtol |proxy| (the proxy exact, its error 0): every
    pass by proxy, computed in float32, passes `compare` in float64."""
    gen = torch.Generator().manual_seed(7)
    proxy = torch.randn(400, generator=gen, dtype=torch.float64).mul_(10.0).to(torch.float32)
    passed = 0
    for p in proxy.tolist():
        edge = torch.tensor([p + TOL.atol + TOL.rtol * abs(p)], dtype=torch.float64).to(torch.float32)
        for step in (-1, 0, 1):
            out = edge.clone()
            for _ in range(abs(step)):
                out = torch.nextafter(out, torch.tensor([math.copysign(math.inf, step)]))
            want = torch.tensor([p], dtype=torch.float32)
            if comparison.passes_by_proxy(out, want, TOL, 0.0):
                passed += 1
                assert comparison.compare(out, want.double(), TOL).ok, (p, float(out))
    assert passed >= 300  # the steps inside the bound are decided
