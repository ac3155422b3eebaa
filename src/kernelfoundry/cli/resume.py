"""`kernelfoundry resume RUN`: continue a stopped run (imported unfinished) through the API's ResumeRun.

The evolver checks the run before anything changes (it exists, is stopped, its hardware, generator and
task can be served there) and refuses with the reason. Once resumed, the run is followed like
`kernelfoundry run` follows a new one (Ctrl-C cancels it, a second Ctrl-C detaches), unless --detach.

Exit status: 0 when the run completes (or, with --detach, is running again), 1 when the evolver does not
know the run, refuses to resume it, or the run ends without completing, 2 when no evolver answers,
130 when interrupted.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import grpc
import typer

from kernelfoundry.cli.output import CliError, fail, rejection, stderr_console
from kernelfoundry.cli.run import conclude, follow, signals_taken, status_name
from kernelfoundry.client import KernelFoundryClient, ResumeRefused
from kernelfoundry.config import load_settings

READY_TIMEOUT_S = 5.0


def refusal(error: ResumeRefused) -> CliError:
    """The server's refusal as the user sees it: its reason and message, exit status 1."""
    parsed = rejection(str(error))
    reason = "run_not_found" if error.code == grpc.StatusCode.NOT_FOUND else parsed.reason
    return CliError(reason, parsed.message, 1)


def resume(
    run_id: Annotated[str, typer.Argument(help="The stopped run to continue, e.g. run-0123456789ab")],
    detach: Annotated[bool, typer.Option(help="Return once the run is running again")] = False,
    address: Annotated[str | None, typer.Option(help="gRPC API address (default: KF_GRPC_ADDRESS)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON")] = False,
) -> None:
    """Continue a stopped run (one `lineage import` brought in unfinished) where its lineage left off."""
    with signals_taken():
        _resume(run_id, detach, address, json_output)


def _resume(run_id: str, detach: bool, address: str | None, json_output: bool) -> None:
    target = address or load_settings().grpc_address
    console = stderr_console()
    client = KernelFoundryClient(target)
    try:
        if not client.ready(READY_TIMEOUT_S):
            raise CliError(
                "unreachable", f"no KernelFoundry answers at {target}; start it with `kernelfoundry up`"
            )
        try:
            progress = client.resume(run_id)
        except ResumeRefused as exc:
            raise refusal(exc) from exc
        except grpc.RpcError as exc:
            raise CliError("resume_failed", f"resuming {run_id} failed: {exc.details()}") from exc
        if not json_output:
            console.print(
                f"run {run_id} resumed at generation {progress.iteration} of {progress.iterations} "
                f"({progress.candidates_generated} candidates so far); "
                f"`kernelfoundry cancel {run_id}` ends it",
                markup=False,
                highlight=False,
            )
        if detach:
            if json_output:
                document = {"run_id": run_id, "status": status_name(progress.status), "resumed": True}
                sys.stdout.write(json.dumps(document, indent=2) + "\n")
            return
        hint = f"it keeps running; `kernelfoundry cancel {run_id}` ends it"
        followed = follow(client, run_id, console, quiet=json_output, detach_hint=hint)
    except CliError as error:
        raise fail(error, json_output) from None
    finally:
        client.close()
    conclude(followed, run_id, console, json_output, resumed=True)
