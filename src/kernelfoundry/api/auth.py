"""Who may call the public gRPC APIs: TLS for the connection, a bearer token for each call.

Server side (`ServerSecurity`): with a token configured (KF_API_TOKEN), every call must carry the metadata
`authorization: Bearer <token>`; anything else, an unknown method included, is answered UNAUTHENTICATED
before any check or handler runs, with nothing about the API in the answer. The standard health service
is exempt: load balancers and probes ask it without credentials, and it tells only whether the server is
serving. Reflection is not exempt (grpcurl sends the same header with -H). With a certificate and key
(KF_API_TLS_CERT, KF_API_TLS_KEY) the server listens with TLS only. Without a token every call is served,
as in the embedded local stack.

Client side (`ClientSecurity`): the same token and the CA that signed the server's certificate
(KF_API_TLS_CA; KF_API_TLS_SERVER_NAME when the address is not a name in the certificate). The token
travels in each call's metadata through a client interceptor, so it works on a TLS channel and (for
in-cluster traffic behind network policies only) on a plaintext one.

`bearer_token` and `token_accepted` are pure; reading the files is the `from_settings` constructors' job.
"""

from __future__ import annotations

import hmac
from collections import namedtuple
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from kernelfoundry.api.standard import HEALTH_SERVICE
from kernelfoundry.config import Settings
from kernelfoundry.telemetry.logging import get_logger

log = get_logger(__name__)

AUTHORIZATION = "authorization"
SCHEME = "bearer"
UNAUTHENTICATED_MESSAGE = "unauthenticated: this API needs the metadata 'authorization: Bearer <token>'"
EXEMPT_SERVICES: frozenset[str] = frozenset({HEALTH_SERVICE})


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The token of the call's `authorization: Bearer <token>` metadata, or None without one."""
    for key, value in metadata or ():
        if key.lower() != AUTHORIZATION:
            continue
        text = value.decode() if isinstance(value, bytes) else str(value)
        scheme, _, token = text.strip().partition(" ")
        if scheme.lower() == SCHEME and token.strip():
            return token.strip()
    return None


def token_accepted(metadata: Iterable[tuple[str, Any]] | None, token: str) -> bool:
    """Whether the call carries `token` (compared in constant time)."""
    presented = bearer_token(metadata)
    if presented is None or not token:
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


def _service_of(method: str) -> str:
    """`/package.Service/Method` -> `package.Service`."""
    return method.strip("/").rsplit("/", 1)[0]


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for every call without the token, except to the exempt services."""

    def __init__(self, token: str, exempt: frozenset[str] = EXEMPT_SERVICES) -> None:
        if not token:
            raise ValueError("a token interceptor needs a token")
        self._token = token
        self.exempt = exempt

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        if _service_of(handler_call_details.method) in self.exempt or token_accepted(
            handler_call_details.invocation_metadata, self._token
        ):
            return await continuation(handler_call_details)
        log.warning("call refused: no valid token", method=handler_call_details.method[:200])
        handler = await continuation(handler_call_details)
        if handler is not None and handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(_refuse_stream)
        if handler is not None and handler.stream_stream is not None:  # reflection
            return grpc.stream_stream_rpc_method_handler(_refuse_stream)
        return grpc.unary_unary_rpc_method_handler(_refuse_unary)  # unknown methods too: nothing revealed


async def _refuse_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)


async def _refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
    yield  # pragma: no cover - abort raises; this makes the function an async generator


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class ServerSecurity:
    """How a public server admits calls: a token (empty: none needed), a TLS certificate (None: plaintext)."""

    token: str = ""
    certificate_chain: bytes | None = None
    private_key: bytes | None = None

    @property
    def tls(self) -> bool:
        return self.certificate_chain is not None

    @property
    def authenticates(self) -> bool:
        return bool(self.token)

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [TokenAuthInterceptor(self.token)] if self.token else []

    def add_port(self, server: Any, address: str) -> int:
        """Listen on `address`: with TLS when a certificate is configured. Returns the port."""
        if self.certificate_chain is None or self.private_key is None:
            return int(server.add_insecure_port(address))
        credentials = grpc.ssl_server_credentials([(self.private_key, self.certificate_chain)])
        return int(server.add_secure_port(address, credentials))

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerSecurity:
        cert, key = settings.api_tls_cert, settings.api_tls_key
        if bool(cert) != bool(key):
            raise ValueError("KF_API_TLS_CERT and KF_API_TLS_KEY are set together or not at all")
        return cls(
            token=settings.api_token.get_secret_value(),
            certificate_chain=_read(cert, "TLS certificate") if cert else None,
            private_key=_read(key, "TLS private key") if key else None,
        )


PLAINTEXT_SERVER = ServerSecurity()


class _Metadata:
    """Adds the token to a call's metadata (sync and asyncio client interceptors share it)."""

    def __init__(self, token: str) -> None:
        self.pair = (AUTHORIZATION, f"Bearer {token}")

    def details(self, details: Any) -> Any:
        metadata = list(details.metadata or ())
        metadata.append(self.pair)
        return details._replace(metadata=metadata)


class _SyncDetails(
    namedtuple(  # grpc's own examples build call details this way
        "_SyncDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    """A blocking call's details with its metadata replaced."""


class _SyncToken(  # type: ignore[misc]
    grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor, grpc.StreamStreamClientInterceptor
):
    def __init__(self, token: str) -> None:
        self._metadata = _Metadata(token)

    def _details(self, details: Any) -> Any:
        copy = _SyncDetails(
            details.method,
            details.timeout,
            details.metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )
        return self._metadata.details(copy)

    def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), request)

    def intercept_stream_stream(self, continuation, client_call_details, requests):  # type: ignore[no-untyped-def]
        return continuation(self._details(client_call_details), requests)


class _AsyncUnaryToken(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._metadata = _Metadata(token)

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(self._metadata.details(client_call_details), request)


class _AsyncStreamToken(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._metadata = _Metadata(token)

    async def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(self._metadata.details(client_call_details), request)


class _AsyncBidiToken(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._metadata = _Metadata(token)

    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        return await continuation(self._metadata.details(client_call_details), request_iterator)


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a public API: TLS (with the CA that signed the server's certificate, or the
    system roots) and a token for each call. The default is plaintext without a token."""

    token: str = ""
    tls: bool = False
    root_certificates: bytes | None = None  # None with tls: the system's roots
    server_name: str = ""  # the name the certificate must carry, when the address is not that name

    def _options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A blocking channel to `address` that carries the token in every call."""
        all_options = [*options, *self._options()]
        if self.tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=self.root_certificates)
            channel = grpc.secure_channel(address, credentials, options=all_options)
        else:
            channel = grpc.insecure_channel(address, options=all_options)
        if self.token:
            return grpc.intercept_channel(channel, _SyncToken(self.token))
        return channel

    def aio_channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        """An asyncio channel to `address` that carries the token in every call."""
        all_options = [*options, *self._options()]
        interceptors: list[Any] = (
            [_AsyncUnaryToken(self.token), _AsyncStreamToken(self.token), _AsyncBidiToken(self.token)]
            if self.token
            else []
        )
        if self.tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=self.root_certificates)
            return grpc.aio.secure_channel(
                address, credentials, options=all_options, interceptors=interceptors or None
            )
        return grpc.aio.insecure_channel(address, options=all_options, interceptors=interceptors or None)

    @classmethod
    def from_settings(cls, settings: Settings) -> ClientSecurity:
        ca = settings.api_tls_ca
        return cls(
            token=settings.api_token.get_secret_value(),
            tls=bool(ca) or settings.api_tls,
            root_certificates=_read(ca, "TLS CA certificate") if ca else None,
            server_name=settings.api_tls_server_name,
        )


PLAINTEXT_CLIENT = ClientSecurity()
