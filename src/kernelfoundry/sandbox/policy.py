"""What a sandboxed process may see and use: the policy, its environment and its wire form.

Pure: no process is started here. The policy travels to the launcher (`kernelfoundry.sandbox.enter`)
as JSON, so everything in it is plain data. The environment is built by allow-list: a name passes
only if a pattern of `env_allow` matches it and no secret pattern does; `env_set` values are the
caller's own choice and always apply. This module must never read the environment itself.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelfoundry.sandbox.errors import SandboxError

# Names of the parent's environment that never pass through, whatever the allow-list says:
# service configuration (KF_*), cloud credentials, tokens, keys, passwords.
SECRET_PATTERNS: tuple[str, ...] = (
    "KF_*",
    "AWS_*",
    "AZURE_*",
    "GOOGLE_*",
    "GCP_*",
    "OPENAI_*",
    "ANTHROPIC_*",
    "HF_*",
    "HUGGING_FACE_*",
    "GITHUB_*",
    "NATS_*",
    "MONGO*",
    "*_TOKEN",
    "*_TOKEN_*",
    "*_KEY",
    "*_KEY_*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*_AUTH",
    "SSH_*",
)

# What a Python process (torch, OpenMP, MKL, CUDA) needs from its parent's environment.
PYTHON_ENV_ALLOW: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "OMP_*",
    "KMP_*",
    "GOMP_*",
    "MKL_*",
    "OPENBLAS_*",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
)

# Protections a policy may leave out (`SandboxPolicy.relax`), in the launcher's words.
RELAXABLE: tuple[str, ...] = ("userns", "landlock", "rlimits")
POLICY_FORMAT = 1
MAX_POLICY_BYTES = 64 * 1024


@dataclass(frozen=True)
class SandboxPolicy:
    """Everything the launcher applies before it becomes the target program.

    `memory_bytes` limits the address space (RLIMIT_AS) on the CPU and the data segment (RLIMIT_DATA)
    when `gpu` is set (CUDA reserves terabytes of address space). `max_processes` is RLIMIT_NPROC, which
    counts *threads* of the sandbox's user id; it means "this sandbox" only inside the sandbox's own user
    namespace, and the kernel never applies it to uid 0 ("nproc" in `protections` says it is in force).
    `writable` adds folders or files the process may write besides `scratch` (e.g. /dev/shm for NCCL).
    `require` names protections without which the launcher refuses to run the target (`SandboxError`
    reason `sandbox_unavailable`).
    `relax` names protections to leave out (RELAXABLE: "userns", "landlock", "rlimits"). None means: none
    on the CPU; with `gpu`, the ones this host's GPU stack cannot run under, found once per process by
    `kernelfoundry.sandbox.gpu_probe` (strictest working set first). What is left out is absent from
    `protections`, so `require` still refuses a host that cannot give what the caller needs.
    """

    scratch: Path
    env_allow: tuple[str, ...] = ()
    env_set: Mapping[str, str] = field(default_factory=dict)
    memory_bytes: int | None = None
    max_processes: int | None = None
    max_open_files: int = 256
    cpu_seconds: int | None = None
    gpu: bool = False
    file_bytes: int | None = 1 << 30
    writable: tuple[Path, ...] = ()
    require: tuple[str, ...] = ()
    relax: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not Path(self.scratch).is_absolute():
            raise SandboxError("bad_policy", f"scratch must be an absolute path, got {self.scratch!s}")
        for name, value in (
            ("memory_bytes", self.memory_bytes),
            ("max_processes", self.max_processes),
            ("cpu_seconds", self.cpu_seconds),
            ("file_bytes", self.file_bytes),
            ("max_open_files", self.max_open_files),
        ):
            if value is not None and value <= 0:
                raise SandboxError("bad_policy", f"{name} must be positive, got {value}")
        unknown = sorted(set(self.relax or ()) - set(RELAXABLE))
        if unknown:
            raise SandboxError("bad_policy", f"relax names unknown protections {unknown}; known: {RELAXABLE}")
        for path in self.writable:
            if not Path(path).is_absolute():
                raise SandboxError("bad_policy", f"writable paths must be absolute, got {path!s}")

    @classmethod
    def for_python(
        cls,
        scratch: Path,
        *,
        env_allow: tuple[str, ...] = PYTHON_ENV_ALLOW,
        env_set: Mapping[str, str] | None = None,
        **limits: Any,
    ) -> SandboxPolicy:
        """The usual policy for a Python worker: PYTHON_ENV_ALLOW, HOME and TMPDIR set to scratch."""
        chosen = {"HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONNOUSERSITE": "1", **(env_set or {})}
        return cls(scratch=scratch, env_allow=env_allow, env_set=chosen, **limits)

    def environment(self, parent: Mapping[str, str]) -> dict[str, str]:
        """The environment the sandboxed process gets, built from `parent` by allow-list."""
        passed = {
            name: value
            for name, value in parent.items()
            if _matches_any(name, self.env_allow) and not is_secret_name(name)
        }
        passed.update(self.env_set)
        return passed

    def to_json(self) -> str:
        data = asdict(self)
        data["format"] = POLICY_FORMAT
        data["scratch"] = str(self.scratch)
        data["writable"] = [str(p) for p in self.writable]
        data["env_set"] = dict(self.env_set)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SandboxPolicy:
        if len(text) > MAX_POLICY_BYTES:
            raise SandboxError("bad_policy", f"policy JSON is {len(text)} bytes, limit {MAX_POLICY_BYTES}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SandboxError("bad_policy", f"policy is not JSON: {exc}") from exc
        if not isinstance(data, dict) or data.pop("format", None) != POLICY_FORMAT:
            raise SandboxError("bad_policy", f"policy format must be {POLICY_FORMAT}")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise SandboxError("bad_policy", f"unknown policy fields: {', '.join(sorted(unknown))}")
        data["scratch"] = Path(data["scratch"])
        data["writable"] = tuple(Path(p) for p in data.get("writable", ()))
        data["env_allow"] = tuple(data.get("env_allow", ()))
        data["require"] = tuple(data.get("require", ()))
        if data.get("relax") is not None:
            data["relax"] = tuple(data["relax"])
        return cls(**data)


def is_secret_name(name: str) -> bool:
    """True when an environment variable of this name must never reach a sandboxed process."""
    return _matches_any(name.upper(), SECRET_PATTERNS)


def _matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
