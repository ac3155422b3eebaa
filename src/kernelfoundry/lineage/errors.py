"""The lineage store's error: a reason code users can count and filter by, and a message naming the thing.

Reasons: `invalid_uri`, `schema_too_new`, `unsupported_format`, `corrupt_archive`, `run_not_found`,
`invalid_record`, `repository_closed`. Must never wrap driver exceptions silently: a database that is down
raises the driver's own error so the caller can retry the delivery.
"""

from __future__ import annotations


class LineageError(ValueError):
    """A lineage request that cannot be served as asked."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"
