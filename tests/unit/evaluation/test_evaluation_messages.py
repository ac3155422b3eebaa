"""The runner's replies: one strict schema per kind, bounded, answering the command's nonce."""

from __future__ import annotations

from typing import Any

import pytest

from kernelfoundry.evaluation import messages, reasons
from kernelfoundry.evaluation.messages import ProtocolViolation, new_nonce, parse_reply


def called(nonce: str, **changes: Any) -> dict[str, Any]:
    reply = {"kind": "called", "nonce": nonce, "claimed_ns": 1000, "launches": 1, "outputs": []}
    reply.update(changes)
    return reply


def test_a_well_formed_reply_is_accepted() -> None:
    nonce = new_nonce()
    reply = parse_reply(called(nonce, outputs=[{"dtype": "float32", "shape": [4, 4]}]), "called", nonce)
    assert isinstance(reply, messages.Called)
    assert reply.claimed_ns == 1000 and reply.outputs[0].shape == [4, 4]


@pytest.mark.parametrize(
    "changes",
    [
        {"claimed_ns": -1},
        {"claimed_ns": 1.5},
        {"claimed_ns": "1000"},
        {"launches": True},
        {"verdict": "correct"},
        {"outputs": [{"dtype": "float32", "shape": [1] * 17}]},
        {"outputs": [{"dtype": "x" * 17, "shape": [1]}]},
    ],
)
def test_a_reply_outside_its_schema_is_a_violation(changes: dict[str, Any]) -> None:
    nonce = new_nonce()
    with pytest.raises(ProtocolViolation):
        parse_reply(called(nonce, **changes), "called", nonce)


def test_a_reply_to_another_command_or_of_another_kind_is_a_violation() -> None:
    nonce = new_nonce()
    with pytest.raises(ProtocolViolation, match="nonce"):
        parse_reply(called(new_nonce()), "called", nonce)
    with pytest.raises(ProtocolViolation, match="expected"):
        parse_reply({"kind": "idle", "nonce": nonce}, "called", nonce)


def test_a_failure_may_only_name_a_candidate_reason() -> None:
    nonce = new_nonce()
    failed = parse_reply(
        {"kind": "failed", "nonce": nonce, "reason": reasons.KERNEL_ERROR, "message": "returned 1"},
        "called",
        nonce,
    )
    assert isinstance(failed, messages.Failed)
    for reason in (reasons.WORKER_ERROR, reasons.TIMEOUT, "correct"):
        with pytest.raises(ProtocolViolation):
            parse_reply({"kind": "failed", "nonce": nonce, "reason": reason, "message": ""}, "called", nonce)
    with pytest.raises(ProtocolViolation):
        parse_reply(
            {"kind": "failed", "nonce": nonce, "reason": reasons.KERNEL_ERROR, "message": "x" * 5000},
            "called",
            nonce,
        )


def test_nonces_are_fresh() -> None:
    assert len({new_nonce() for _ in range(100)}) == 100
