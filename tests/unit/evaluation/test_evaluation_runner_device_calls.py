"""Every method the runner calls on its device exists on every runner device.

The runner only meets a staged device (CUDA) on a GPU; a call added there for a method the CUDA runner
device lacked failed every GPU evaluation (`release_memory`, an AttributeError read as the candidate's
glue_error) while the CPU tests passed. This reads the calls from the runner's source instead.
"""

from __future__ import annotations

import inspect
import re

import pytest

from kernelfoundry.evaluation import runner
from kernelfoundry.evaluation.backends.base import RunnerDevice
from kernelfoundry.evaluation.backends.cpu import CpuRunnerDevice
from kernelfoundry.evaluation.backends.cuda import CudaRunnerDevice


def device_calls() -> set[str]:
    """The device's attributes the runner names (`self.device.x(` calls, `self.device.x` handed on)."""
    names = set(re.findall(r"self\.device\.([a-z_]+)\b", inspect.getsource(runner)))
    return names - {"device"}  # the device's name (a string), not a method


def test_the_runner_calls_its_device() -> None:
    assert {"place", "synchronize", "release_memory", "timed"} <= device_calls()


@pytest.mark.parametrize("device", [RunnerDevice, CpuRunnerDevice, CudaRunnerDevice])
@pytest.mark.parametrize("name", sorted(device_calls()))
def test_every_runner_device_has_each_method_the_runner_calls(device: type, name: str) -> None:
    if name in re.findall(r"self\.([a-z_]+) = ", inspect.getsource(device)):
        return  # an attribute the device sets itself (the CUDA device's stream)
    if name == "stream" and device is not CudaRunnerDevice:
        return  # read only under CUDA graphs, on the CUDA device
    assert callable(getattr(device, name, None)), f"{device.__name__} has no {name}()"
