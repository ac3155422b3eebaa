"""What the runner may say to the judge: one declared schema per reply, strict types, bounded sizes.

The judge sends a command with a fresh random `nonce` and accepts exactly one reply: the expected kind
echoing that nonce, or `failed` with a reason from RUNNER_REASONS. Anything else (unknown fields, wrong
types, oversized strings, a stale or guessed nonce, a reply of another kind, a second message) is a
`runner_protocol_violation`. Commands (judge -> runner) are plain dicts built by `command()`; the runner
trusts them. Pure: pydantic only.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernelfoundry.evaluation import reasons

MAX_TEXT = 2000
MAX_OUTPUTS = 64
MAX_DIMS = 16
MAX_CLAIMS = 100_000

# Failures a runner may report about the candidate it runs. It cannot claim success this way, and it
# cannot pick a reason that blames the judge or the worker.
RUNNER_REASONS = (
    reasons.ABI_MISMATCH,
    reasons.MISSING_ENTRY_POINT,
    reasons.LOAD_ERROR,
    reasons.KERNEL_ERROR,
    reasons.GLUE_ERROR,
    reasons.GLUE_NO_KERNEL_LAUNCH,
    reasons.WRONG_SHAPE,
    reasons.WRONG_DTYPE,
    reasons.ILLEGAL_ADDRESS,
    reasons.DEVICE_ERROR,
    reasons.ASYNC_SIDE_STREAM,
    reasons.INPUT_MODIFIED,
    reasons.RUNNER_OUT_OF_MEMORY,
)

Nonce = Annotated[str, Field(min_length=16, max_length=64, pattern=r"^[0-9a-f]+$")]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Count = Annotated[int, Field(ge=0, le=1 << 40)]


class _Reply(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    nonce: Nonce


class Ready(_Reply):
    kind: Literal["ready"]
    pid: Count


class Loaded(_Reply):
    kind: Literal["loaded"]


MAX_SETS = 256
MAX_INPUTS = 256
Digest = Annotated[int, Field(ge=0, lt=1 << 62)]


class Bound(_Reply):
    kind: Literal["bound"]
    # Drawn input sets: the fingerprint of each tensor the runner drew, per set (comparison.content_digest).
    digests: Annotated[
        list[Annotated[list[Digest], Field(max_length=MAX_INPUTS)]], Field(max_length=MAX_SETS)
    ] = []
    # Lent output memory (device_share.py): whether the runner mapped it, and why not where it did not.
    lent: bool = False
    lent_error: Text = ""


class OutputMeta(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    dtype: Annotated[str, Field(max_length=16)]
    shape: Annotated[list[Count], Field(max_length=MAX_DIMS)]


class Called(_Reply):
    kind: Literal["called"]
    claimed_ns: Count
    launches: Count
    # Glue candidates: what forward() returned (the judge checks it against the reference's outputs).
    outputs: Annotated[list[OutputMeta], Field(max_length=MAX_OUTPUTS)]


class BatchDone(_Reply):
    kind: Literal["batch_done"]
    calls: Count


class Idle(_Reply):
    kind: Literal["idle"]


class Fetched(_Reply):
    kind: Literal["fetched"]


class Probed(_Reply):
    kind: Literal["probed"]
    written: bool
    note: Text


class Failed(_Reply):
    kind: Literal["failed"]
    reason: Literal[RUNNER_REASONS]  # type: ignore[valid-type]
    message: Text


Reply = Ready | Loaded | Bound | Called | BatchDone | Idle | Fetched | Probed | Failed
REPLY_KINDS: dict[str, type[_Reply]] = {
    "ready": Ready,
    "loaded": Loaded,
    "bound": Bound,
    "called": Called,
    "batch_done": BatchDone,
    "idle": Idle,
    "fetched": Fetched,
    "probed": Probed,
    "failed": Failed,
}


class ProtocolViolation(Exception):
    """A reply that does not fit the schema, the nonce or the command it answers."""


def new_nonce() -> str:
    return secrets.token_hex(16)


def command(op: str, nonce: str, **fields: Any) -> dict[str, Any]:
    """A judge -> runner command."""
    return {"op": op, "nonce": nonce, **fields}


def parse_reply(data: dict[str, Any], expected: str, nonce: str) -> Reply:
    """The reply to the command of `nonce`, of kind `expected` or `failed`; ProtocolViolation otherwise."""
    kind = data.get("kind")
    if kind not in (expected, "failed"):
        raise ProtocolViolation(f"expected a `{expected}` reply, got kind {str(kind)[:40]!r}")
    try:
        reply = REPLY_KINDS[str(kind)].model_validate(data, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ProtocolViolation(
            f"a `{kind}` reply does not fit its schema at `{where}`: {first.get('msg', '')[:200]}"
        ) from None
    if not secrets.compare_digest(reply.nonce, nonce):
        raise ProtocolViolation(f"a `{kind}` reply answers another command (nonce mismatch)")
    return reply  # type: ignore[return-value]
