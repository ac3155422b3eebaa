"""A content-addressed cache of build outcomes, so that a repeated candidate costs nothing.

The key is the sha256 of everything that decides the bytes of the library: source code, entry point,
flags (tunable defines included), toolchain version, target and the ABI header. An entry is the
library `<key>.so` plus its record `<key>.json`; the record is written last, so an entry without one
does not exist yet. Writers build in a private temp dir under the cache and publish with
`os.replace`, so concurrent builds of one key are safe (the last identical copy wins). Compile
errors are cached too (they are deterministic); timeouts and resource-limit failures are not.
This module never runs a compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelfoundry.abi import HEADER_NAME, include_dir

_KEY_SCHEMA = 1


@dataclass(frozen=True)
class CacheEntry:
    artifact: Path | None  # None for a cached failure
    record: Mapping[str, Any]  # ok, reason, log


def abi_header_digest() -> str:
    return hashlib.sha256((include_dir() / HEADER_NAME).read_bytes()).hexdigest()


def build_key(code: str, entry_point: str, flags: tuple[str, ...], toolchain: str, target: str) -> str:
    material = {
        "schema": _KEY_SCHEMA,
        "code": code,
        "entry_point": entry_point,
        "flags": list(flags),
        "toolchain": toolchain,
        "target": target,
        "abi": abi_header_digest(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class BuildCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def scratch_dir(self) -> Path:
        """A private directory on the cache's filesystem for one build (so publishing is a rename)."""
        tmp = self.root / "tmp"
        tmp.mkdir(exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="kf-build-", dir=tmp))

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.so", folder / f"{key}.json"

    def lookup(self, key: str) -> CacheEntry | None:
        artifact, record_path = self._paths(key)
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if record.get("ok"):
            if not artifact.is_file():
                return None
            return CacheEntry(artifact=artifact, record=record)
        return CacheEntry(artifact=None, record=record)

    def store(self, key: str, built: Path | None, record: Mapping[str, Any]) -> Path | None:
        """Publish a build outcome; `built` (the library, if any) is moved into the cache."""
        artifact, record_path = self._paths(key)
        artifact.parent.mkdir(parents=True, exist_ok=True)
        if built is not None:
            os.replace(built, artifact)
        staging = record_path.with_name(f".{record_path.name}.{os.getpid()}.{id(record)}")
        staging.write_text(json.dumps(dict(record)), encoding="utf-8")
        os.replace(staging, record_path)
        return artifact if built is not None else None
