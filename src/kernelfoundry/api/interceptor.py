"""One server interceptor for every method of every public gRPC service: the edge.

For each call, in order: a payload that does not decode is INVALID_ARGUMENT (the request deserializer is
replaced by one that never raises); the request is checked against its declared contract (`contract`);
the service's admission check for the method, if any, runs (limits, what the deployment serves); then the
handler. Errors a client can act on (`errors.api_error_of`) become their status with a message naming
the field and the rule, logged once as a warning; anything else is a server fault: logged with its stack
here, answered INTERNAL with a reference and nothing of the server's internals. Nothing is created before
every check has passed, because the handler only runs after them. The standard health and reflection
services (`standard.STANDARD_SERVICES`, not in our protos) pass through untouched; nothing else does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from kernelfoundry.api import contract
from kernelfoundry.api.errors import ApiError, api_error_of, invalid
from kernelfoundry.api.standard import STANDARD_SERVICES
from kernelfoundry.telemetry.logging import get_logger

log = get_logger(__name__)

Admission = Callable[[Any], Awaitable[None]]
# A status message is for people; one that long only echoes client text back.
MAX_MESSAGE_CHARS = 1000


@dataclass(frozen=True)
class Undecodable:
    """What the safe deserializer returns for bytes that are not the method's request message."""

    size: int


def _safe_deserializer(decode: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        if decode is None:
            return data
        try:
            return decode(data)
        except Exception:  # DecodeError, RecursionError, ...: the client's bytes, not our fault
            return Undecodable(len(data))

    return deserialize


def _method_name(full: str) -> str:
    return full.rsplit("/", 1)[-1]


def _service_name(full: str) -> str:
    """`/package.Service/Method` -> `package.Service`."""
    return full.strip("/").rsplit("/", 1)[0]


class EdgeInterceptor(grpc.aio.ServerInterceptor):
    """Decoding, contract and admission checks before any handler; status codes clients can act on."""

    def __init__(self, service: str, admissions: Mapping[str, Admission] | None = None) -> None:
        self.service = service
        self.admissions = dict(admissions or {})

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        if _service_name(handler_call_details.method) in STANDARD_SERVICES:
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = _method_name(handler_call_details.method)
        deserializer = _safe_deserializer(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # the public services have no client-streaming methods

    async def admit(self, method: str, request: Any) -> None:
        """Every check before the handler; raises ApiError for a request that must not reach it."""
        if isinstance(request, Undecodable):
            raise invalid(
                "undecodable_request",
                f"the {request.size}-byte payload is not a valid {method} request message",
            )
        if isinstance(request, Message):
            contract.check(request)
        admission = self.admissions.get(method)
        if admission is not None:
            await admission(request)

    def _unary(self, method: str, behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                await self.admit(method, request)
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._refuse(method, exc, context)
                raise AssertionError("unreachable: abort raises") from exc

        return unary

    def _stream(self, method: str, behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                await self.admit(method, request)
                async for item in behavior(request, context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._refuse(method, exc, context)

        return stream

    async def _refuse(self, method: str, exc: Exception, context: grpc.aio.ServicerContext) -> None:
        error = api_error_of(exc)
        if error is None:
            reference = uuid.uuid4().hex[:12]
            log.exception("request failed", service=self.service, method=method, reference=reference)
            error = ApiError(
                grpc.StatusCode.INTERNAL,
                "internal",
                f"the server failed on this request (reference {reference})",
            )
        else:
            log.warning(
                "request refused",
                service=self.service,
                method=method,
                code=error.code.name,
                reason=error.reason,
                detail=error.message[:MAX_MESSAGE_CHARS],
            )
        await context.abort(error.code, f"{error.reason}: {error.message}"[:MAX_MESSAGE_CHARS])
