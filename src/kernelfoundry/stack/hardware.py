"""What hardware this machine has, as the tokens that subjects and configuration use.

CPU always (`cpu.<machine>`); CUDA when a GPU answers (`cuda.<model>` for executors, built for
`cuda.sm<cc>`), limited to the GPUs this process may use: a CUDA_VISIBLE_DEVICES in the environment
(indices in nvidia-smi's PCI order, or GPU UUIDs and their prefixes) keeps only the devices it lists.
Only reads the machine; never changes it. The parsing and the visibility rule are pure functions, so the
devices can be given instead of found (tests without a GPU). The host's memory (/proc/meminfo) is read
here too, for the judge's input-set budget and the validation's memory check.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class HardwareTarget:
    execute: str  # executor subject token, e.g. cpu.x86_64 or cuda.h200
    build: str  # compiler subject token, e.g. cpu.x86_64 or cuda.sm90
    devices: tuple[int, ...] = ()  # CUDA device indices of this model; empty for the CPU
    uuids: tuple[str, ...] = ()  # the devices' UUIDs, index for index, when nvidia-smi gave them

    @property
    def backend(self) -> str:
        return self.execute.split(".", 1)[0]

    def device_uuids(self) -> list[tuple[int, str]]:
        """(index, UUID) of every device; the UUID is empty when nvidia-smi did not give it."""
        return list(zip(self.devices, self.uuids or ("",) * len(self.devices), strict=True))

    def keeping(self, indices: list[int]) -> HardwareTarget:
        """This target with only the devices whose index is in `indices`."""
        pairs = [(index, uuid) for index, uuid in self.device_uuids() if index in indices]
        uuids = tuple(uuid for _, uuid in pairs)
        return replace(self, devices=tuple(index for index, _ in pairs), uuids=uuids if all(uuids) else ())


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields in bytes (those given in kB, and the counts without a unit as they are)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def host_meminfo() -> dict[str, int]:
    """This host's /proc/meminfo (parse_meminfo); empty where there is none."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            return parse_meminfo(meminfo.read())
    except (OSError, ValueError):
        return {}


def physical_memory_bytes() -> int:
    """This host's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_target() -> HardwareTarget:
    machine = platform.machine().lower() or "x86_64"
    token = re.sub(r"[^a-z0-9_]", "_", machine)
    return HardwareTarget(execute=f"cpu.{token}", build=f"cpu.{token}")


def parse_gpu_list(csv: str) -> list[HardwareTarget]:
    """Targets from `nvidia-smi --query-gpu=index,uuid,name,compute_cap --format=csv,noheader` output (or
    the same without `uuid`): one per GPU model, with the indices of its devices (each gets its own
    executor)."""
    by_model: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for line in csv.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            parts.insert(1, "")
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        index, uuid, name, cap = int(parts[0]), parts[1], parts[2], parts[3]
        words = name.lower().replace("nvidia", "").split()
        model = re.split(r"[^a-z0-9]", words[0])[0] if words else ""
        sm = "sm" + cap.replace(".", "") if cap else "sm90"
        by_model.setdefault((f"cuda.{model or 'gpu'}", f"cuda.{sm}"), []).append((index, uuid))
    targets = []
    for (execute, build), devices in by_model.items():
        uuids = tuple(uuid for _, uuid in devices)
        targets.append(
            HardwareTarget(execute, build, tuple(i for i, _ in devices), uuids if all(uuids) else ())
        )
    return targets


def visible_targets(targets: list[HardwareTarget], cuda_visible_devices: str | None) -> list[HardwareTarget]:
    """The GPU targets limited to the devices `cuda_visible_devices` lists (None: every device; empty or
    `-1`: none). Entries are nvidia-smi indices or GPU UUIDs (a unique prefix is enough, as for CUDA);
    like CUDA, the list ends at the first entry that names no device. A model left without devices is
    dropped."""
    if cuda_visible_devices is None:
        return list(targets)
    known = [pair for target in targets for pair in target.device_uuids()]
    chosen: list[int] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.isdigit():
            matches = [index for index, _ in known if index == int(entry)]
        else:
            matches = [index for index, uuid in known if entry and uuid.startswith(entry)]
        if len(matches) != 1 or matches[0] in chosen:
            break
        chosen.append(matches[0])
    kept = [target.keeping(chosen) for target in targets]
    return [target for target in kept if target.devices]


def cuda_targets(cuda_visible_devices: str | None = None) -> list[HardwareTarget]:
    """One target per distinct GPU model that nvidia-smi lists, limited to the visible devices; empty
    without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return visible_targets(parse_gpu_list(out), cuda_visible_devices)


def detect(cuda_visible_devices: str | None = None) -> list[HardwareTarget]:
    """The CPU and the GPUs visible under `cuda_visible_devices` (the caller's CUDA_VISIBLE_DEVICES)."""
    return [cpu_target(), *cuda_targets(cuda_visible_devices)]
