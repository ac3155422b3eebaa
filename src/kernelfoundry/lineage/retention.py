"""Retention of large blobs (build logs, artifact references): a size cap and an expiry.

Lineage itself (runs, candidates, evaluations, snapshots, usage, the journal) is never dropped; only
build logs are cut to `max_blob_bytes` when written and emptied, together with their artifact reference,
once older than `blob_ttl`. Pure: must never import a database driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

TRUNCATION_MARKER = "\n[... {dropped} bytes truncated by the lineage retention policy ...]\n"
PURGED_MARKER = "[build log purged by the lineage retention policy]"


@dataclass(frozen=True)
class RetentionPolicy:
    max_blob_bytes: int = 256 * 1024
    blob_ttl: timedelta = timedelta(days=30)

    def __post_init__(self) -> None:
        if self.max_blob_bytes < 256:
            raise ValueError(f"max_blob_bytes={self.max_blob_bytes} is too small to hold a truncation marker")


def cap_blob(text: str, max_bytes: int) -> str:
    """`text` if it fits in `max_bytes` of UTF-8, else its head and tail around a marker.

    Head and tail both survive because a compiler's first error sits at the start of its log and the
    linker's or sanitizer's verdict at the end.
    """
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(TRUNCATION_MARKER.format(dropped=len(data))) - 8
    head_bytes = room // 2
    tail_bytes = room - head_bytes
    head = data[:head_bytes].decode("utf-8", errors="ignore")
    tail = data[len(data) - tail_bytes :].decode("utf-8", errors="ignore")
    dropped = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return head + TRUNCATION_MARKER.format(dropped=dropped) + tail
