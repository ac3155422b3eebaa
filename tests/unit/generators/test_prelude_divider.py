"""The prelude's kf_divider (division by a divisor fixed at launch as a multiply-high, an add and a
shift) gives exactly C's 64-bit quotient and remainder: every divisor's edge values, powers of two and
their neighbours, the 32-bit limits, divisors and dividends past 2^31 (the 64-bit path), and a million
random pairs. Built with g++ from the prelude's own text."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import kernelfoundry.abi
from kernelfoundry.generators.heuristic.prelude import PRELUDE

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

CHECK = r"""
#include <stdio.h>
static uint64_t state = 88172645463325252ull;
static uint64_t next(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; }
static long checked = 0, wrong = 0;
static void check(int64_t d, int64_t a) {
  kf_divider v = kf_divider_of(d);
  ++checked;
  if (kf_div(v, a) != a / d || kf_mod(v, a) != a % d) {
    if (wrong++ < 5) printf("wrong: %lld / %lld\n", (long long)a, (long long)d);
  }
}
int main(void) {
  const int64_t edges[] = {1, 2, 3, 5, 7, 31, 32, 33, 1000, 32767, 32768, 65535, 65536, 65537, 1 << 30,
                           (1 << 30) + 1, 0x7ffffffe, 0x7fffffff, 0x80000000ll, 0x80000001ll, 1ll << 40};
  const int n = sizeof(edges) / sizeof(edges[0]);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k)
      for (int64_t e = -2; e <= 2; ++e) {
        if (edges[k] + e >= 0) check(edges[i], edges[k] + e);
        if (edges[i] * 3 + e >= 0) check(edges[i], edges[i] * 3 + e);
      }
  for (int s = 1; s < 31; ++s)
    for (int64_t e = -1; e <= 1; ++e)
      for (int k = 0; k < 200; ++k) check(((int64_t)1 << s) + e, (int64_t)(next() & 0x7fffffff));
  for (long r = 0; r < 1000000; ++r) {
    const int bits = 1 + (int)(next() % 31);
    const int64_t d = 1 + (int64_t)(next() & (((uint64_t)1 << bits) - 1));
    check(d > 0x7fffffff ? 0x7fffffff : d, (int64_t)(next() & 0x7fffffff));
  }
  printf("checked %ld wrong %ld\n", checked, wrong);
  return wrong != 0;
}
"""


def test_divider_matches_c_division(tmp_path: Path) -> None:
    source = tmp_path / "divider.c"
    source.write_text(PRELUDE + CHECK)
    binary = tmp_path / "divider"
    include = Path(kernelfoundry.abi.__file__).parent
    subprocess.run(["g++", "-O2", "-x", "c++", f"-I{include}", str(source), "-o", str(binary)], check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout
    assert run.stdout.strip().endswith("wrong 0")
    assert int(run.stdout.split()[-3]) > 1_000_000
