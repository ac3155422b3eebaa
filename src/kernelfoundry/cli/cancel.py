"""`kernelfoundry cancel RUN`: end a run through the API's CancelRun, and say how it ended.

Exit status: 0 when the run is now cancelled (or had already ended: its status is printed), 1 when the
evolver does not know the run, 2 when no evolver answers.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import grpc
import typer

from kernelfoundry.cli.output import CliError, fail, stderr_console
from kernelfoundry.cli.run import status_name
from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.config import load_settings

READY_TIMEOUT_S = 5.0


def cancel(
    run_id: Annotated[str, typer.Argument(help="The run to cancel, e.g. run-0123456789ab")],
    address: Annotated[str | None, typer.Option(help="gRPC API address (default: KF_GRPC_ADDRESS)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON")] = False,
) -> None:
    """Cancel a running run (a run resumed by `up`, or one a detached `run` left behind)."""
    target = address or load_settings().grpc_address
    client = KernelFoundryClient(target)
    try:
        if not client.ready(READY_TIMEOUT_S):
            raise CliError(
                "unreachable",
                f"no KernelFoundry answers at {target}; start it with `kernelfoundry up` "
                "(a run left open is resumed there, then it can be cancelled)",
            )
        try:
            progress = client.cancel(run_id)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise CliError("run_not_found", f"the evolver at {target} has no run {run_id!r}", 1) from exc
            raise CliError("cancel_failed", f"cancelling {run_id} failed: {exc.details()}") from exc
    except CliError as error:
        raise fail(error, json_output) from None
    finally:
        client.close()
    status = status_name(progress.status)
    if json_output:
        document = {"run_id": run_id, "status": status, "message": progress.message}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        stderr_console().print(f"run {run_id}: {status} ({progress.message})", markup=False)
