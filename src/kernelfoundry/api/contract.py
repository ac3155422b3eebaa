"""The declared request contract: the buf.validate rules in protos/, checked by protovalidate.

One validator for the process (it caches compiled rules per message type). A request that breaks a rule
becomes one INVALID_ARGUMENT naming every broken field and its rule, e.g.
`config.islands: must be greater than or equal to 0 and less than or equal to 1000 (int32.gte_lte)`.
"""

from __future__ import annotations

import protovalidate
from google.protobuf.message import Message

from kernelfoundry.api.errors import ApiError, invalid

_validator = protovalidate.Validator()
# A message listing hundreds of violations helps nobody and costs memory: the first few say enough.
MAX_REPORTED = 8
MAX_KEY_SHOWN = 40


def _path(violation: protovalidate.Violation) -> str:
    parts: list[str] = []
    for element in violation.proto.field.elements:
        name = element.field_name
        subscript = element.subscript
        if subscript is not None and subscript.field == "index":
            name += f"[{subscript.value}]"
        elif subscript is not None:  # a map key is client text: quoted, and cut short
            name += f"[{str(subscript.value)[:MAX_KEY_SHOWN]!r}]"
        parts.append(name)
    return ".".join(parts) or "(request)"


def violations(request: Message) -> list[str]:
    """Every broken rule of `request`, as `field.path: message (rule id)`."""
    found = _validator.collect_violations(request)
    return [f"{_path(v)}: {v.proto.message} ({v.proto.rule_id})" for v in found]


def check(request: Message) -> None:
    """Raise INVALID_ARGUMENT naming every broken field and rule; return when the request keeps them all."""
    broken = violations(request)
    if broken:
        shown = broken[:MAX_REPORTED]
        more = f"; and {len(broken) - len(shown)} more" if len(broken) > len(shown) else ""
        raise contract_error("; ".join(shown) + more)


def contract_error(message: str) -> ApiError:
    return invalid("invalid_request", message)
