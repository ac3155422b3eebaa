"""The untrusted runner: `python -m kernelfoundry.evaluation.runner --fd N --device D`.

One fresh process per candidate, spawned by the judge inside the sandbox before the candidate arrives
(torch imported, device initialised), never reused. It loads the candidate's unit (dlopen) and glue,
maps the judge's input buffers (read-only on the CPU) or uploads them from staging (GPU), and answers
the judge's commands over the channel with JSON replies of messages.py's schema. It holds no reference
output, no tolerance and no verdict; nothing it says is believed without a check on the judge's side.
Its stdout is moved to stderr so a unit's prints cannot reach the channel.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelfoundry.evaluation import channel, comparison, reasons
from kernelfoundry.evaluation.backends import RunnerDevice, backend_for_device
from kernelfoundry.evaluation.messages import RUNNER_REASONS
from kernelfoundry.evaluation.reasons import EvaluationFailure, classify_exception
from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec

PR_SET_PDEATHSIG = 1


@dataclass
class Binding:
    """One shape's buffers as the candidate sees them."""

    host_sets: list[list[Any]]  # per input set: tensors (judge memory) and Python scalars
    sets: list[list[Any]]  # the same, where the candidate computes (device copies when staged)
    params: list[Any]  # direct units: parameters then buffers, in ABI order
    host_outputs: list[Any]
    outputs: list[Any]
    descriptors: list[Any] = field(default_factory=list)  # per set, direct units only
    out_descriptors: Any = None
    model: Any = None  # the glue's ModelNew instance


class Runner:
    """Command handlers; each returns the reply's fields (kind included)."""

    def __init__(self, device: RunnerDevice, staged: bool) -> None:
        self.device = device
        self.staged = staged
        self.unit: Any = None
        self.launcher: Any = None
        self.model_new_cls: type | None = None
        self.entry_point = ""
        self.shapes: dict[int, Binding] = {}
        self.arenas: list[Arena] = []

    # ---- commands ----------------------------------------------------------------------------------
    def load(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        import torch

        from kernelfoundry.evaluation.glue_runtime import KernelLauncher, load_glue
        from kernelfoundry.evaluation.unit import CompiledUnit

        if len(fds) != 1:
            raise EvaluationFailure(reasons.LOAD_ERROR, "the load command carries no artifact")
        threads = int(command["threads"])
        torch.set_num_threads(threads)
        self.unit = CompiledUnit(Path(f"/proc/self/fd/{fds[0]}"), name=str(command["artifact_name"]))
        os.close(fds[0])
        self.unit.set_threads(threads)
        self.entry_point = str(command["entry_point"])
        glue = str(command.get("glue", ""))
        if glue.strip():
            self.launcher = KernelLauncher(self.unit, self.device.stream_handle, comparison.poison_)
            self.model_new_cls = load_glue(glue, self.launcher)
        else:
            self.unit.entry(self.entry_point)
        return {"kind": "loaded"}

    def bind(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        from kernelfoundry.evaluation.unit import DescriptorArray, as_tensors

        n_sets = len(command["sets"])
        if len(fds) != n_sets + 2:
            raise EvaluationFailure(reasons.LOAD_ERROR, f"bind carries {len(fds)} buffers, not {n_sets + 2}")
        sizes = command["sizes"]
        # Inputs and parameters read-only: a unit that writes one faults here, never in the judge.
        input_arenas = [
            Arena(fd, int(size), writable=False) for fd, size in zip(fds[:-1], sizes[:-1], strict=True)
        ]
        output_arena = Arena(fds[-1], int(sizes[-1]), writable=True)
        self.arenas += [*input_arenas, output_arena]
        host_sets = []
        for arena, items in zip(input_arenas[:n_sets], command["sets"], strict=True):
            host_sets.append(
                [
                    arena.tensor(TensorSpec.from_json(i["tensor"])) if "tensor" in i else i["scalar"]
                    for i in items
                ]
            )
        param_arena = input_arenas[n_sets]
        host_params = {
            p["name"]: param_arena.tensor(TensorSpec.from_json(p["tensor"])) for p in command["params"]
        }
        host_outputs = [output_arena.tensor(TensorSpec.from_json(o)) for o in command["outputs"]]
        place = self.device.place if self.staged else (lambda t: t)
        sets = [[place(v) if hasattr(v, "data_ptr") else v for v in s] for s in host_sets]
        outputs = [place(o) for o in host_outputs]
        binding = Binding(host_sets, sets, [], host_outputs, outputs)
        if self.model_new_cls is None:
            binding.params = [place(host_params[name]) for name in command["direct_params"]]
            device = outputs[0].device if outputs else "cpu"
            binding.descriptors = [DescriptorArray(as_tensors(s, device) + binding.params) for s in sets]
            binding.out_descriptors = DescriptorArray(outputs)
        else:
            binding.model = self._build_model(command["init_inputs"], host_params)
        self.shapes[int(command["shape"])] = binding
        return {"kind": "bound"}

    def _build_model(self, init_inputs: list[Any], host_params: dict[str, Any]) -> Any:
        import torch

        assert self.model_new_cls is not None
        try:
            torch.manual_seed(0)
            model = self.model_new_cls(*init_inputs).to(self.device.device).eval()
        except Exception as exc:
            raise EvaluationFailure(
                reasons.GLUE_ERROR, f"ModelNew(*init_inputs) failed: {type(exc).__name__}: {exc}"
            ) from exc
        with torch.no_grad():
            for name, tensor in model.state_dict().items():
                source = host_params.get(name)
                if source is not None and tuple(source.shape) == tuple(tensor.shape):
                    tensor.copy_(source)
        return model

    def _invoke(self, binding: Binding, index: int, trial: bool) -> Any:
        """One call of the candidate on input set `index`; returns forward()'s outputs (glue) or None."""
        import torch

        if binding.model is None:
            self.unit.call(
                self.entry_point,
                binding.descriptors[index],
                binding.out_descriptors,
                self.device.stream_handle(),
            )
            return None
        if self.launcher is not None:
            self.launcher.poisoning = trial
        with torch.no_grad():
            result = binding.model(*binding.sets[index])
        if isinstance(result, torch.Tensor):
            return [result]
        if isinstance(result, list | tuple) and all(isinstance(r, torch.Tensor) for r in result):
            return list(result)
        raise EvaluationFailure(reasons.WRONG_SHAPE, f"ModelNew.forward returned {type(result).__name__}")

    def call(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        binding = self.shapes[int(command["shape"])]
        index = int(command["set"])
        trial = bool(command.get("trial", False))
        if self.staged and command.get("refresh"):
            for placed, host in zip(binding.sets[index], binding.host_sets[index], strict=True):
                if hasattr(placed, "data_ptr"):
                    self.device.refresh(placed, host)
        launches = self.unit.launches
        snapshots: list[Any] = []
        if self.staged and binding.model is None:  # outside the timed region (the judge does it on the CPU)
            with self.device.on_stream():
                for out in binding.outputs:
                    comparison.poison_(out)
            self.device.synchronize()

        def run() -> Any:
            result = self._invoke(binding, index, trial)
            if trial and self.staged:  # read on the stream, before the device-wide synchronise
                snapshots.extend(o.clone() for o in (result if result is not None else binding.outputs))
            return result

        with self.device.on_stream():
            result, claimed_ns = self.device.timed(run)
        metas = []
        if result is not None:
            metas = [{"dtype": str(r.dtype).replace("torch.", ""), "shape": list(r.shape)} for r in result]
            if len(result) == len(binding.outputs) and all(
                tuple(r.shape) == tuple(o.shape) and r.dtype == o.dtype
                for r, o in zip(result, binding.outputs, strict=True)
            ):
                for r, o in zip(result, binding.outputs, strict=True):
                    o.copy_(r)
                self.device.synchronize()
        if trial and self.staged:
            self._check_inputs_intact(binding, index)
        if snapshots:
            got = result if result is not None else binding.outputs
            if not all(comparison.bitwise_equal(s, o) for s, o in zip(snapshots, got, strict=True)):
                raise EvaluationFailure(
                    reasons.ASYNC_SIDE_STREAM,
                    "an output changed after the call returned: work was still running outside the given "
                    "stream (read on the stream vs after a device-wide synchronise)",
                )
        return {
            "kind": "called",
            "claimed_ns": int(claimed_ns),
            "launches": self.unit.launches - launches,
            "outputs": metas,
        }

    def _check_inputs_intact(self, binding: Binding, index: int) -> None:
        """Staged memory: the device copies of this set's inputs still equal the judge's staging (a
        diagnostic the judge does not rely on: its own copies are out of the runner's reach anyway)."""
        for i, (placed, host) in enumerate(zip(binding.sets[index], binding.host_sets[index], strict=True)):
            if hasattr(placed, "data_ptr") and not comparison.bitwise_equal(placed.cpu(), host):
                raise EvaluationFailure(reasons.INPUT_MODIFIED, f"input {i} was modified by the candidate")

    def batch(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        binding = self.shapes[int(command["shape"])]
        indices = [int(i) for i in command["sets"]]
        with self.device.on_stream():
            for index in indices:
                self._invoke(binding, index, trial=False)
        self.device.synchronize()
        return {"kind": "batch_done", "calls": len(indices)}

    def idle(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        return {"kind": "idle"}

    def fetch(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        binding = self.shapes[int(command["shape"])]
        if self.staged:
            for placed, host in zip(binding.outputs, binding.host_outputs, strict=True):
                self.device.fetch(placed, host)
        return {"kind": "fetched"}

    def probe(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """CUDA: call while the stream is captured into a graph; nothing enqueued on it runs, so an
        output that changes was written by work on another stream. Uncapturable: inconclusive."""
        import torch

        binding = self.shapes[int(command["shape"])]
        index = int(command["set"])
        if binding.model is not None or not self.staged:
            return {"kind": "probed", "written": False, "note": "not applicable"}
        for out in binding.outputs:
            comparison.poison_(out)
        before = [o.clone() for o in binding.outputs]
        self.device.synchronize()
        graph = torch.cuda.CUDAGraph()
        note = ""
        try:
            with torch.cuda.graph(graph, stream=self.device.stream, capture_error_mode="relaxed"):  # type: ignore[attr-defined]
                self.unit.call(
                    self.entry_point,
                    binding.descriptors[index],
                    binding.out_descriptors,
                    self.device.stream_handle(),
                )
        except Exception as exc:
            note = f"stream-capture probe inconclusive: {type(exc).__name__}: {str(exc)[:200]}"
        self.device.synchronize()
        written = not all(
            comparison.bitwise_equal(a, b) for a, b in zip(binding.outputs, before, strict=True)
        )
        del graph
        return {"kind": "probed", "written": written, "note": note}


def _failure_reply(failure: EvaluationFailure) -> dict[str, Any]:
    reason = failure.reason if failure.reason in RUNNER_REASONS else reasons.KERNEL_ERROR
    return {"kind": "failed", "reason": reason, "message": failure.message[:1900]}


def serve(sock: socket.socket, runner: Runner) -> None:
    handlers = {
        "load": runner.load,
        "bind": runner.bind,
        "call": runner.call,
        "batch": runner.batch,
        "idle": runner.idle,
        "fetch": runner.fetch,
        "probe": runner.probe,
    }
    while True:
        try:
            command, fds = channel.receive_with_fds(sock, None)
        except channel.ChannelClosed:
            return
        handler = handlers.get(str(command.get("op")))
        try:
            if handler is None:
                raise EvaluationFailure(reasons.KERNEL_ERROR, f"unknown command {command.get('op')!r}")
            reply = handler(command, fds)
        except EvaluationFailure as failure:
            reply = _failure_reply(failure)
        except Exception as exc:
            reply = _failure_reply(classify_exception(exc, "the candidate"))
        reply["nonce"] = command.get("nonce", "")
        channel.send(sock, reply)
        if reply["kind"] == "failed":
            return


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kernelfoundry.evaluation.runner")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--nonce", required=True)
    parser.add_argument("--log", default="")
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args(argv)
    if args.log:  # the judge quotes its tail in crash reports
        log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 2)
        os.close(log)
    os.dup2(2, 1)  # a unit's prints go to stderr, never near the channel
    sys.stdout = sys.stderr
    _die_with_parent()
    sock = socket.socket(fileno=args.fd)
    backend = backend_for_device(args.device)
    import torch  # noqa: F401  (imported before the candidate arrives: off the hot path)

    device = backend.runner_device(args.device)
    device.setup()
    channel.send(sock, {"kind": "ready", "nonce": args.nonce, "pid": os.getpid()})
    serve(sock, Runner(device, staged=backend.memory == "staged"))


if __name__ == "__main__":
    main()
