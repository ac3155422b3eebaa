"""The `kernelfoundry` command: entry points only wire configuration to adapters and start loops."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from kernelfoundry.config import load_settings

app = typer.Typer(
    name="kernelfoundry",
    help="Evolve faster CUDA and C++/OpenMP kernels for a PyTorch reference computation.",
    no_args_is_help=True,
    add_completion=False,
    # a crash report never prints local variables (a request's headers carry a provider's key); older
    # typer releases printed them by default
    pretty_exceptions_show_locals=False,
)

SERVICES = ("evolver", "llm", "compiler", "executor", "store")


@app.command()
def serve(
    service: Annotated[str, typer.Argument(help="evolver | llm | compiler | executor | store")],
    nats_url: Annotated[str | None, typer.Option(help="NATS server (default: KF_NATS_URL)")] = None,
    hardware: Annotated[
        str | None, typer.Option(help="Hardware served, e.g. cpu.x86_64 or cuda.h200")
    ] = None,
) -> None:
    """Run one service in the foreground (the Kubernetes entry point)."""
    if service not in SERVICES:
        raise typer.BadParameter(f"unknown service {service!r}; choose one of {', '.join(SERVICES)}")
    settings = load_settings(nats_url=nats_url, hardware=hardware)
    module = __import__(f"kernelfoundry.services.{service}.main", fromlist=["main"])
    module.main(settings)


@app.command()
def up(
    state_dir: Annotated[
        Path | None, typer.Option(help="Where JetStream data, lineage and kernels live")
    ] = None,
    grpc_address: Annotated[str | None, typer.Option(help="Address of the gRPC API")] = None,
    store_grpc_address: Annotated[str | None, typer.Option(help="Address of the lineage API")] = None,
) -> None:
    """Start the whole system on this machine: JetStream, every service, the gRPC API. Ctrl-C stops it."""
    from rich.console import Console

    from kernelfoundry.stack.supervisor import Stack

    settings = load_settings(
        state_dir=state_dir, grpc_address=grpc_address, store_grpc_address=store_grpc_address
    )
    console = Console(stderr=True)
    stack = Stack(
        state_dir=settings.state_dir,
        grpc_address=settings.grpc_address,
        store_grpc_address=settings.store_grpc_address,
        cpu_executors=settings.cpu_executors,
        gpu_executors=settings.gpu_executors,
    )
    stopping = False

    def request_stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    # Explicit for SIGINT too: a shell that starts `up` in the background makes it ignore SIGINT.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        with console.status("starting JetStream and the services..."):
            stack.start()
        console.print(
            f"[green]KernelFoundry is up[/green]: gRPC {stack.grpc_address}, "
            f"lineage API {stack.store_grpc_address}, NATS {stack.nats_url}"
        )
        executors = ", ".join(s.name.removeprefix("executor:") for s in stack.executor_services())
        console.print(f"executors: {executors}; logs in {stack.state_dir / 'logs'}")
        from kernelfoundry.cli.resumed import announce_resumed

        announce_resumed(console, stack.store_grpc_address)
        while not stopping:
            dead = [s.name for s in stack.services.values() if not s.alive()]
            if dead:
                console.print(
                    f"[red]service(s) exited: {', '.join(dead)}[/red]; see {stack.state_dir / 'logs'}"
                )
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        console.print("stopping...")
        stack.stop()


def _register_optional_commands() -> None:
    from kernelfoundry.cli.cancel import cancel
    from kernelfoundry.cli.evaluate import evaluate
    from kernelfoundry.cli.report import report
    from kernelfoundry.cli.resume import resume
    from kernelfoundry.cli.run import run

    app.command("run")(run)
    app.command("cancel")(cancel)
    app.command("resume")(resume)
    app.command("evaluate")(evaluate)
    app.command("report")(report)
    app.add_typer(__import__("kernelfoundry.cli.lineage", fromlist=["_"]).lineage_app, name="lineage")


_register_optional_commands()
