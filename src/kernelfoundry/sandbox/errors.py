"""The one error the sandbox raises: a reason code users can count, and a message naming what was wrong."""

from __future__ import annotations

# bad_policy: the policy itself is invalid; sandbox_unavailable: a required protection cannot be applied
# on this host; sandbox_setup_failed: the launcher failed before the target started (exec failed, ...).
REASONS = frozenset({"bad_policy", "sandbox_unavailable", "sandbox_setup_failed"})


class SandboxError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
