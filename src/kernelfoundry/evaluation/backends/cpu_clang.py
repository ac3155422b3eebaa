"""The cpu_clang backend: C++/OpenMP units built by clang++ (kernelfoundry.toolchains.clang) and run on
the host CPU.

Only the compiler differs from the `cpu` backend: the device kind, memory strategy, timing defaults and
both device strategies are the CPU's, so a clang-built unit is judged exactly like a g++-built one.
A device string names a device kind, not a compiler: `backend_for_device("cpu")` stays the `cpu`
backend (registered first), and `backend_named("cpu_clang")` reaches this one.
"""

from __future__ import annotations

from dataclasses import replace

from kernelfoundry.evaluation.backends.cpu import CPU

CPU_CLANG = replace(CPU, name="cpu_clang")
