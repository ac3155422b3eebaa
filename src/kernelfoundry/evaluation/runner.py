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
SA_SIGINFO = 0x4
SA_RESETHAND = 0x80000000
SI_ADDR_OFFSET = 16  # siginfo_t.si_addr on Linux (after si_signo, si_errno, si_code and padding)
# If reporting a fault ever hangs (the fault interrupted a lock the interpreter then needs), the
# process dies of SIGALRM this much later instead of waiting for the judge's deadline.
FAULT_REPORT_S = 2
# From this size on, the runner keeps a tensor's content digest where it kept a copy: a drawn set's
# intact-inputs check compares its digests as drawn (a refresh hands its fresh draw's memory back to the
# driver at once, _redraw), and a trial's outputs read on the stream are digested there, not cloned
# (6.4 GB each on level1/19_ReLU, beside the judge on an 80 GB card).
LARGE_BYTES = 1 << 30


class _SigAction(ctypes.Structure):
    """glibc's struct sigaction (x86_64, aarch64)."""

    _fields_ = [
        ("sa_sigaction", ctypes.c_void_p),
        ("sa_mask", ctypes.c_ulong * 16),
        ("sa_flags", ctypes.c_int),
        ("sa_restorer", ctypes.c_void_p),
    ]


_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class ReadOnlyGuard:
    """Turns a write into the read-only input or parameter memory into `input_modified`.

    On the CPU the runner maps inputs and parameters read-only (and the judge has sealed them: no
    mprotect, no write() can change them), so a unit that writes one faults. A SIGSEGV / SIGBUS handler
    looks at the faulting address: inside one of those mappings, the runner answers the current command
    with `failed: input_modified` naming the input, then exits; anywhere else the handler (installed
    with SA_RESETHAND) returns, the access faults again and the process dies of the signal as before
    (`crash`). What it reports is the runner's word, and a failure either way: the judge's own inputs
    stay intact whatever the runner says."""

    def __init__(self) -> None:
        self.regions: list[tuple[int, int, str]] = []  # start, end, what
        self.sock: socket.socket | None = None
        self.nonce = ""
        self._handler = _HANDLER_TYPE(self._on_fault)  # kept alive as long as the guard

    def watch(self, start: int, size: int, what: str) -> None:
        self.regions.append((start, start + size, what))

    def region(self, address: int) -> str | None:
        for start, end, what in self.regions:
            if start <= address < end:
                return what
        return None

    def install(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        action = _SigAction()
        action.sa_sigaction = ctypes.cast(self._handler, ctypes.c_void_p).value
        action.sa_flags = SA_SIGINFO | SA_RESETHAND
        for signum in (signal.SIGSEGV, signal.SIGBUS):
            libc.sigaction(int(signum), ctypes.byref(action), None)

    def _on_fault(self, signum: int, info: int | None, context: int | None) -> None:
        ctypes.CDLL(None).alarm(FAULT_REPORT_S)
        address = ctypes.c_void_p.from_address(info + SI_ADDR_OFFSET).value if info else None
        what = self.region(address or 0)
        if what is None or self.sock is None:
            ctypes.CDLL(None).alarm(0)
            return  # SA_RESETHAND: the access faults again and the signal's default action ends us
        message = (
            f"the candidate wrote into {what} at {address:#x} ({signal.Signals(signum).name}): inputs and "
            "parameters are read-only for a unit (their memory is mapped read-only in the runner and "
            "sealed by the judge, whose copy is unchanged)"
        )
        with contextlib.suppress(Exception):
            channel.send(
                self.sock,
                {"kind": "failed", "reason": reasons.INPUT_MODIFIED, "message": message, "nonce": self.nonce},
            )
        os._exit(3)


@dataclass
class Binding:
    """One shape's buffers as the candidate sees them."""

    host_sets: list[list[Any]]  # per input set: tensors (judge memory) and Python scalars; [] when drawn
    sets: list[list[Any]]  # the same, where the candidate computes (device copies when staged)
    params: list[Any]  # direct units: parameters then buffers, in ABI order
    host_outputs: list[Any]
    outputs: list[Any]
    descriptors: list[Any] = field(default_factory=list)  # per set, direct units only
    out_descriptors: Any = None
    model: Any = None  # the glue's ModelNew instance
    draws: Any = None  # drawn sets: the task's module and shape, to draw from the judge's seeds
    seeds: list[int] = field(default_factory=list)  # drawn sets: the seed each set's values came from
    # drawn sets: each set's tensors' content digests as drawn, kept current for sets of LARGE_BYTES
    # or more (their intact-inputs check)
    digests: list[list[int]] = field(default_factory=list)
    lent_outputs: list[Any] = field(default_factory=list)  # views of the judge's lent device memory


def _large(tensor: Any) -> bool:
    return tensor.numel() * tensor.element_size() >= LARGE_BYTES


def _snapshot(output: Any) -> Any:
    """What a trial keeps of an output as read on the stream: a copy, or from LARGE_BYTES its digest's
    sums, queued on the stream as the copy would be."""
    return comparison.digest_sums(output) if _large(output) else output.clone()


def _unchanged(snapshot: Any, output: Any) -> bool:
    """The output after the device-wide synchronise still equals what was read on the stream."""
    if _large(output):
        return bool(comparison.digest_sums(output).equal(snapshot))
    return comparison.bitwise_equal(snapshot, output)


class Runner:
    """Command handlers; each returns the reply's fields (kind included)."""

    def __init__(self, device: RunnerDevice, staged: bool, guard: ReadOnlyGuard | None = None) -> None:
        self.device = device
        self.staged = staged
        self.guard = guard or ReadOnlyGuard()
        self.unit: Any = None
        self.launcher: Any = None
        self.model_new_cls: type | None = None
        self.entry_point = ""
        self.shapes: dict[int, Binding] = {}
        self.arenas: list[Arena] = []
        self.borrowed: list[Any] = []  # the judge's lent device memory, mapped until the runner ends

    # ---- commands ----------------------------------------------------------------------------------
    def load(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        import torch

        from kernelfoundry.evaluation.allocator import keep_heap
        from kernelfoundry.evaluation.glue_runtime import KernelLauncher, load_glue
        from kernelfoundry.evaluation.unit import CompiledUnit

        if len(fds) != 1:
            raise EvaluationFailure(reasons.LOAD_ERROR, "the load command carries no artifact")
        threads = int(command["threads"])
        torch.set_num_threads(threads)
        keep_heap()  # the judge's heap policy while it times eager: a glue's torch calls are timed alike
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
        """The shape's buffers placed (and drawn) on the device. Running out of memory here, before any
        of the candidate's code but the glue's constructor, is the device's memory held elsewhere:
        runner_out_of_memory, which the executor delivers again later, not a verdict on the candidate."""
        try:
            return self._bind(command, fds)
        except EvaluationFailure:
            raise
        except Exception as exc:
            if not reasons.is_out_of_memory(exc):
                raise
            raise EvaluationFailure(
                reasons.RUNNER_OUT_OF_MEMORY,
                f"placing the shape's buffers on the device ran out of memory: {type(exc).__name__}: "
                f"{str(exc)[:600]}",
            ) from exc

    def _bind(self, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        from kernelfoundry.evaluation.unit import DescriptorArray, as_tensors

        n_sets = len(command["sets"])
        draw = command.get("draw")
        set_buffers = 0 if draw else n_sets
        lent = command.get("lent_outputs")
        lent_fd = fds.pop() if lent and fds else None
        if len(fds) != set_buffers + 2:
            raise EvaluationFailure(
                reasons.LOAD_ERROR, f"bind carries {len(fds)} buffers, not {set_buffers + 2}"
            )
        sizes = command["sizes"]
        # Inputs and parameters read-only: a unit that writes one faults here, never in the judge.
        input_arenas = [
            Arena(fd, int(size), writable=False) for fd, size in zip(fds[:-1], sizes[:-1], strict=True)
        ]
        # a PROT_NONE page after the outputs: a write past their end faults, whatever lies beyond
        output_arena = Arena(fds[-1], int(sizes[-1]), writable=True, guarded=True)
        self.arenas += [*input_arenas, output_arena]
        if self.staged:  # page-locked: staging and fetching outputs run at the link's speed
            if lent_fd is None:  # outputs through lent device memory: pinned only if that fails
                self.device.pin(output_arena.address(), output_arena.size)
            for arena in input_arenas:
                self.device.pin(arena.address(), arena.size, read_only=True)
        for i, arena in enumerate(input_arenas):
            what = f"input set {i} of shape {command['shape']}" if i < set_buffers else "the parameters"
            self.guard.watch(arena.address(), arena.size, what)
        host_sets = []
        for arena, items in zip(input_arenas[:set_buffers], command["sets"][:set_buffers], strict=True):
            host_sets.append(
                [
                    arena.tensor(TensorSpec.from_json(i["tensor"])) if "tensor" in i else i["scalar"]
                    for i in items
                ]
            )
        param_arena = input_arenas[set_buffers]
        host_params = {
            p["name"]: param_arena.tensor(TensorSpec.from_json(p["tensor"])) for p in command["params"]
        }
        host_outputs = [output_arena.tensor(TensorSpec.from_json(o)) for o in command["outputs"]]
        place = self.device.place if self.staged else (lambda t: t)
        lending: dict[str, Any] = {}
        lent_outputs: list[Any] = []
        if lent_fd is not None:  # the candidate writes straight into the judge's lent device memory
            lent_outputs, lending = self._borrow(lent_fd, int(lent["size"]), command["outputs"])
            if not lent_outputs:
                self.device.pin(output_arena.address(), output_arena.size)
        # where the candidate writes its outputs: their contents before a call never matter (poisoned
        # before each call, or forward()'s results copied in), so a staged device does not upload them
        outputs = lent_outputs or (
            [self.device.blank(o) for o in host_outputs] if self.staged else host_outputs
        )
        digests: list[list[int]] = []
        if draw:
            draws, sets, seeds = self._draw_sets(draw, command["sets"])
            digests = [[comparison.content_digest(v) for v in s if hasattr(v, "data_ptr")] for s in sets]
            binding = Binding([], sets, [], host_outputs, outputs, draws=draws, seeds=seeds, digests=digests)
        else:
            sets = [[place(v) if hasattr(v, "data_ptr") else v for v in s] for s in host_sets]
            binding = Binding(host_sets, sets, [], host_outputs, outputs)
        if self.model_new_cls is None:
            binding.params = [place(host_params[name]) for name in command["direct_params"]]
            device = outputs[0].device if outputs else "cpu"
            binding.descriptors = [DescriptorArray(as_tensors(s, device) + binding.params) for s in sets]
            binding.out_descriptors = DescriptorArray(outputs)
        else:
            binding.model = self._build_model(command["init_inputs"], host_params)
        self.shapes[int(command["shape"])] = binding
        binding.lent_outputs = lent_outputs
        if self.staged:
            # what the draws and digests freed goes back to the driver: the judge beside this runner
            # computes its references on the same device (on an 80 GB card this runner held 30.8 GB
            # for 12.9 GB of sets, and level1/19_ReLU's judge ran out of memory)
            self.device.release_memory()
        return {"kind": "bound", "digests": digests, **lending}

    def _borrow(self, fd: int, size: int, outputs: list[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
        """Views of the judge's lent output memory and the reply's fields; no views where it cannot be
        mapped (the judge then fetches through the host)."""
        from kernelfoundry.evaluation.device_share import ShareError

        try:
            memory = self.device.borrow(fd, size)
            views = [memory.tensor(TensorSpec.from_json(o)) for o in outputs]
        except (ShareError, OSError, ValueError, AttributeError) as exc:
            return [], {"lent": False, "lent_error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            os.close(fd)  # the mapping holds the memory
        self.borrowed.append(memory)
        return views, {"lent": True}

    def _draw_sets(
        self, draw: dict[str, Any], items: list[list[dict[str, Any]]]
    ) -> tuple[Any, list[list[Any]], list[int]]:
        """Every input set drawn here, on the device, from the judge's seeds (a set whose draw fails or
        does not fit its description is left empty: the judge sees the fingerprints differ and stages)."""
        from kernelfoundry.tasks.model import ShapeVariant
        from kernelfoundry.tasks.reference import load_reference_module

        try:
            module = load_reference_module(str(draw["source"]), dict(draw["overrides"]))
        except Exception:
            return None, [[] for _ in items], []
        draws = (module, ShapeVariant(str(draw["shape_name"]), dict(draw["overrides"])))
        seeds = [int(seed) for seed in draw["seeds"]]
        sets = []
        for seed, described in zip(seeds, items, strict=True):
            try:
                values = self._drawn(draws, seed)
            except Exception:
                values = []
            fits = len(values) == len(described) and all(
                ("drawn" in d) == hasattr(v, "data_ptr") for v, d in zip(values, described, strict=True)
            )
            sets.append(
                [v if hasattr(v, "data_ptr") else d["scalar"] for v, d in zip(values, described, strict=True)]
                if fits
                else []
            )
        return draws, sets, seeds

    def _drawn(self, draws: Any, seed: int) -> list[Any]:
        from kernelfoundry.tasks.reference import draw_inputs

        module, shape = draws
        values = draw_inputs(module, shape, seed, self.device.device)
        placed = [v.contiguous() if hasattr(v, "data_ptr") else v for v in values]
        self.device.synchronize()
        return placed

    def _redraw(self, binding: Binding, index: int, seed: int) -> None:
        """A drawn set's fresh values, written into the tensors the candidate already knows."""
        import torch

        fresh = self._drawn(binding.draws, seed)
        with torch.no_grad():
            for placed, value in zip(binding.sets[index], fresh, strict=True):
                if hasattr(placed, "data_ptr"):
                    placed.copy_(value)
        binding.seeds[index] = seed
        drawn_bytes = sum(v.numel() * v.element_size() for v in fresh if hasattr(v, "data_ptr"))
        if drawn_bytes >= LARGE_BYTES:  # what its intact-inputs check compares
            binding.digests[index] = [comparison.content_digest(v) for v in fresh if hasattr(v, "data_ptr")]
        self.device.synchronize()
        del fresh
        if drawn_bytes >= LARGE_BYTES:  # the fresh copy's memory back to the driver (see _bind)
            self.device.release_memory()

    def _build_model(self, init_inputs: list[Any], host_params: dict[str, Any]) -> Any:
        import torch

        from kernelfoundry.tasks.reference import construct_on

        assert self.model_new_cls is not None
        try:
            torch.manual_seed(0)
            # the glue's modules initialised where they compute (a host-side init of a large Linear took
            # seconds per evaluation); its parameters are overwritten from the judge's below anyway
            model = construct_on(self.model_new_cls, init_inputs, self.device.device)
            model = model.to(self.device.device).eval()
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
        if command.get("refresh_seed") is not None and binding.draws is not None:
            self._redraw(binding, index, int(command["refresh_seed"]))
        elif self.staged and command.get("refresh"):
            for placed, host in zip(binding.sets[index], binding.host_sets[index], strict=True):
                if hasattr(placed, "data_ptr"):
                    self.device.refresh(placed, host)
        launches = self.unit.launches
        snapshots: list[Any] = []
        # outside the timed region; the judge poisons shared memory and lent device memory itself
        if self.staged and binding.model is None and not binding.lent_outputs:
            with self.device.on_stream():
                for out in binding.outputs:
                    comparison.poison_(out)
            self.device.synchronize()

        def run() -> Any:
            result = self._invoke(binding, index, trial)
            if trial and self.staged:  # read on the stream, before the device-wide synchronise
                snapshots.extend(_snapshot(o) for o in (result if result is not None else binding.outputs))
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
            if not all(_unchanged(s, o) for s, o in zip(snapshots, got, strict=True)):
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
        """Staged memory: the device copies of this set's inputs still equal the judge's staging (slice
        by slice), or a new draw from their seed; a drawn set of LARGE_BYTES or more keeps its
        digests as drawn instead (a redraw took the set's size again in device memory, 6.4 GB beside
        level1/19's judge on an 80 GB card). A diagnostic the judge does not rely on: its own copies are
        out of the runner's reach anyway."""
        placed_set = binding.sets[index]
        tensors = [v for v in placed_set if hasattr(v, "data_ptr")]
        if binding.draws is not None and sum(v.numel() * v.element_size() for v in tensors) >= LARGE_BYTES:
            for i, (placed, drawn) in enumerate(zip(tensors, binding.digests[index], strict=True)):
                if comparison.content_digest(placed) != drawn:
                    raise EvaluationFailure(
                        reasons.INPUT_MODIFIED,
                        f"input {i} was modified by the candidate (its digest changed)",
                    )
            return
        originals = (
            self._drawn(binding.draws, binding.seeds[index])
            if binding.draws is not None
            else binding.host_sets[index]
        )
        for i, (placed, original) in enumerate(zip(placed_set, originals, strict=True)):
            if not hasattr(placed, "data_ptr"):
                continue
            if not comparison.bitwise_equal(placed, original):
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
        if binding.lent_outputs:  # the outputs are the judge's memory already
            self.device.synchronize()
        elif self.staged:
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
        runner.guard.nonce = str(command.get("nonce", ""))
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
    guard = ReadOnlyGuard()
    guard.sock = sock
    guard.install()
    channel.send(sock, {"kind": "ready", "nonce": args.nonce, "pid": os.getpid()})
    serve(sock, Runner(device, staged=backend.memory == "staged", guard=guard))


if __name__ == "__main__":
    main()
