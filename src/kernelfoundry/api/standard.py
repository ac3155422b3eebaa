"""The standard gRPC services beside each public API: health (grpc.health.v1) and server reflection.

Health answers NOT_SERVING until the API is wired and its server started, SERVING for the whole server
("") and for each public service while it runs, and NOT_SERVING again from the moment it starts shutting
down (load balancers stop sending new calls while running ones finish). Reflection lists the public
services, so grpcurl and similar tools work without the .proto files. Neither is one of our protos: the
edge interceptor lets exactly these services through without contract or admission checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

HEALTH_SERVICE: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION_SERVICE: str = reflection.SERVICE_NAME
STANDARD_SERVICES: frozenset[str] = frozenset({HEALTH_SERVICE, REFLECTION_SERVICE})
WHOLE_SERVER = ""


@dataclass
class StandardServices:
    """The health servicer of one server and the public services it reports on."""

    health: health_aio.HealthServicer
    services: tuple[str, ...]

    async def serving(self) -> None:
        for name in (WHOLE_SERVER, *self.services):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def shutting_down(self) -> None:
        """Every service NOT_SERVING from now on (later `serving` calls change nothing)."""
        await self.health.enter_graceful_shutdown()


async def add_standard_services(server: Any, public_services: Sequence[str]) -> StandardServices:
    """Add health and reflection to `server` (a grpc.aio.Server) for `public_services` (full names, e.g.
    kernelfoundry.v1.KernelFoundryService). Everything answers NOT_SERVING until `serving()`."""
    health = health_aio.HealthServicer()
    # The servicer starts with the whole server SERVING; nothing is served before the API is wired.
    for name in (WHOLE_SERVER, *public_services):
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection((*public_services, HEALTH_SERVICE, REFLECTION_SERVICE), server)
    return StandardServices(health, tuple(public_services))
