"""The public gRPC edge: request contracts, limits, identifiers and status codes, in one layer.

Every request of every public service passes one server interceptor (`interceptor.py`) before a handler
sees it: undecodable payloads and contract violations (the buf.validate rules in protos/, `contract.py`)
are INVALID_ARGUMENT; each service's checks that need server state or configuration (`admission.py`) run
next; domain errors are mapped to status codes clients can act on (`errors.py`). Nothing here creates a
run or writes anything.
"""
