"""Which executor evaluated a candidate, and on which device: named in its logs, metrics and records.

Several executors may serve one hardware (one per GPU of a host, several CPU executors, pods of a
Deployment); the evaluation record says which one evaluated each candidate. The device is the one the host
knows: an executor pinned by CUDA_VISIBLE_DEVICES evaluates on `cuda:0` inside its process, and is
`cuda:<the listed device>` here. Pure: the caller hands in the environment value and the host name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecutorIdentity:
    name: str  # KF_EXECUTOR_NAME, else the host name
    device: str  # cpu, cuda:<host index or UUID>
    host: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "device": self.device, "host": self.host}


def host_device(device: str, cuda_visible_devices: str | None) -> str:
    """The device as the host names it: `cuda:0` under CUDA_VISIBLE_DEVICES=3 is `cuda:3`."""
    if not device.startswith("cuda") or not cuda_visible_devices:
        return device
    listed = [entry.strip() for entry in cuda_visible_devices.split(",") if entry.strip()]
    _, _, local = device.partition(":")
    position = int(local) if local.isdigit() else 0
    if position >= len(listed):
        return device
    return f"cuda:{listed[position]}"


def executor_identity(
    name: str, device: str, host: str, cuda_visible_devices: str | None
) -> ExecutorIdentity:
    return ExecutorIdentity(name=name or host, device=host_device(device, cuda_visible_devices), host=host)
