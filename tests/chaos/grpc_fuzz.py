"""gRPC fuzzing of every public method of the embedded stack (issue 18, issue 23's 10,000 cases).

Test support, not product code: the CI test (tests/chaos/test_fuzz.py) runs a couple of hundred cases,
bench/fuzz_grpc.py runs 10,000. Cases come from a seeded generator alone (the same seed gives the same
cases, in the same order); only run ids that the server made during the campaign are filled in from what
it answered. Each case is one call to one method of KernelFoundryService (the evolver) or LineageService
(the store), sent as raw bytes so that anything a hostile client can put on the wire can be sent:

- valid: a well-formed request with plausible values (ids the server made, ids of the right format that
  name nothing, the real task, in-range numbers);
- fields: a request built field by field from the descriptors with hostile values (path traversal with a
  canary name, NUL and control characters, subject wildcards, 2^31-1 and -2^31, NaN and infinities,
  unknown enum values, lists and maps over their caps, Python code in shape overrides);
- out_of_range, oversized (strings and bytes past their limits and past the request size limit),
  invalid_utf8 (a string field whose bytes are not UTF-8), random_bytes, truncated, mutated (a valid
  request with bytes flipped, inserted or removed), wrong_type (another message's bytes), deep_nesting
  (unknown groups nested up to thousands deep), hostile_task (a task whose reference tries to write files,
  loop, allocate or reach the network, only on SubmitRun), archive (ImportRun of real, damaged and
  compressed-bomb archives), deadline (a call with a deadline too short to finish) and cancel_stream
  (StreamRunProgress cancelled after its first message).

Every accepted SubmitRun is followed by a progress stream cancelled mid-way and a CancelRun of the run,
so the campaign does not leave searches running; what an accepted run does afterwards is checked at the
end (every run the server accepted is final). An answer is a failure when it is UNKNOWN, INTERNAL,
UNIMPLEMENTED, DATA_LOSS or UNAVAILABLE, a client deadline or cancellation on a case that did not ask for
one (a hang), a refusal without a message, or a message carrying a stack trace, an exception class, a
server path or the state folder.
"""

from __future__ import annotations

import gzip
import io
import math
import random
import tarfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from kernelfoundry.v1 import lineage_pb2, run_pb2, service_pb2

EVOLVER_SERVICE = service_pb2.DESCRIPTOR.services_by_name["KernelFoundryService"]
STORE_SERVICE = lineage_pb2.DESCRIPTOR.services_by_name["LineageService"]

# What a client may get for a bad request; anything else is a failure (see `judge`).
ACCEPTABLE = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
CLIENT_MADE = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})
LEAKS = ("Traceback", 'File "', "Error(", "Exception", "site-packages", "/work/", "/home/", "/usr/lib")

KINDS = (
    "valid",
    "fields",
    "out_of_range",
    "oversized",
    "invalid_utf8",
    "random_bytes",
    "truncated",
    "mutated",
    "wrong_type",
    "deep_nesting",
    "hostile_task",
    "archive",
    "deadline",
    "cancel_stream",
)
# Relative weights of the kinds every method gets; SubmitRun also gets hostile task texts, ImportRun
# archives, and a server stream cancellations mid-way (`method_weights`).
WEIGHTS = {
    "valid": 10,
    "fields": 24,
    "out_of_range": 8,
    "oversized": 5,
    "invalid_utf8": 6,
    "random_bytes": 8,
    "truncated": 8,
    "mutated": 14,
    "wrong_type": 5,
    "deep_nesting": 4,
    "deadline": 2,
}
METHOD_KINDS = {"SubmitRun": ("hostile_task", 4), "ImportRun": ("archive", 16)}


def method_weights(method: Method) -> dict[str, int]:
    weights = dict(WEIGHTS)
    if method.name in METHOD_KINDS:
        kind, weight = METHOD_KINDS[method.name]
        weights[kind] = weight
    if method.streaming:
        weights["cancel_stream"] = 8
    return weights


INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Method:
    service: str  # "evolver" or "store"
    name: str
    path: str
    request: type[Message]
    response: type[Message]
    streaming: bool


def methods() -> list[Method]:
    """Every method of both public services, read from the descriptors (a new method is fuzzed too)."""
    found = []
    for service, descriptor, module in (
        ("evolver", EVOLVER_SERVICE, service_pb2),
        ("store", STORE_SERVICE, lineage_pb2),
    ):
        for m in descriptor.methods:
            found.append(
                Method(
                    service=service,
                    name=m.name,
                    path=f"/{descriptor.full_name}/{m.name}",
                    request=getattr(module, m.input_type.name),
                    response=getattr(module, m.output_type.name),
                    streaming=m.server_streaming,
                )
            )
    return found


@dataclass(frozen=True)
class Case:
    index: int
    method: Method
    kind: str
    payload: bytes | None  # None: built at send time from `build` (it needs ids the server made)
    build: Callable[[list[str]], bytes] | None = None
    timeout_s: float = 60.0
    note: str = ""

    def bytes_for(self, run_ids: list[str]) -> bytes:
        if self.payload is not None:
            return self.payload
        assert self.build is not None
        return self.build(run_ids)


@dataclass
class Outcome:
    case: Case
    code: grpc.StatusCode
    details: str
    seconds: float
    failure: str = ""  # empty: an acceptable answer


@dataclass
class Campaign:
    """Everything that happened, for the report and the checks after the fuzzing."""

    outcomes: list[Outcome] = field(default_factory=list)
    accepted_runs: list[str] = field(default_factory=list)
    imported_runs: list[str] = field(default_factory=list)
    follow_up: Counter[str] = field(default_factory=Counter)  # "<method> <code>" of follow-up calls

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failure]

    def codes_by_method(self) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = defaultdict(Counter)
        for o in self.outcomes:
            table[f"{o.case.method.service}.{o.case.method.name}"][o.code.name] += 1
        return dict(table)

    def kinds(self) -> Counter[str]:
        return Counter(o.case.kind for o in self.outcomes)


# ---- hostile values ----


def hostile_strings(canary: str) -> list[str]:
    """Strings a hostile client sends; every path names the canary, so a file written anywhere is found."""
    return [
        "",
        " ",
        "a",
        "run-",
        "run-000000000000",
        "RUN-ABC",
        f"../../{canary}",
        f"/tmp/{canary}",
        f"..\\..\\{canary}",
        f"./{canary}/../../..",
        f"run-{canary}/../../x",
        f"{canary}\x00.json",
        "\x00",
        "a\x00b",
        "kf.events.>",
        "*",
        ">",
        "a.b.c.d",
        "cpu.x86_64.extra",
        "cuda.h200",
        "cpu.",
        ".cpu",
        "nope.nope",
        "heuristic",
        "../../x",
        "\t\r\n",
        "\u202e\u0000\ufeff",
        "😀" * 8,
        "\ud7ff\ue000",
        "%s%s%n",
        "{0!r}",
        "'; DROP TABLE runs; --",
        "\\x00",
        "$(touch /tmp/" + canary + ")",
        "__import__('os').system('touch /tmp/" + canary + "')",
        "1e308",
        "nan",
        "-1",
        "9" * 40,
        "x" * 129,
        "y" * 4097,
        "run-" + "a" * 33,
        "running",
        "finished",
        "generator",
        "level2_elementwise_chain",
    ]


def hostile_ints(bits: int) -> list[int]:
    top = INT32_MAX if bits == 32 else INT64_MAX
    return [0, 1, -1, 2, 3, 7, 64, 65, 1000, 1001, 10000, 100001, 1 << 20, top, -top - 1, top - 1]


HOSTILE_DOUBLES = [0.0, -0.0, 1e-12, 1.0, -1.0, 1e6, 1e6 + 1, 2592001.0, 1e308, -1e308, 5e-324]
NON_FINITE = [math.nan, math.inf, -math.inf]


# ---- the task a valid request carries ----


def valid_task(source: str) -> dict[str, Any]:
    """A task (as Task proto field values) whose reference is `source`, at a small shape."""
    return {"name": "level2_elementwise_chain", "reference_source": source}


def hostile_sources(canary: str) -> list[str]:
    """Task texts that parse, but whose reference does what no reference should."""
    header = "import torch\nimport torch.nn as nn\n"
    model = (
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x)\n"
        "def get_inputs():\n"
        "    return [torch.randn(8, 8)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    return [
        header + f"open('/tmp/{canary}-module', 'w').write('x')\n" + model,
        header + f"import os\nos.system('touch /tmp/{canary}-system')\n" + model,
        header
        + model.replace(
            "return [torch.randn(8, 8)]",
            f"open('/tmp/{canary}-inputs', 'w').write('x')\n    return [torch.randn(8, 8)]",
        ),
        header + "while True:\n    pass\n" + model,
        header + model.replace("return torch.relu(x)", "while True:\n            pass"),
        header + "BIG = bytearray(64 * 1024 * 1024 * 1024)\n" + model,
        header + "import socket\nsocket.create_connection(('127.0.0.1', 4222), timeout=1)\n" + model,
        header + "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1)\nf(0)\n" + model,
        header + "import os\nos.kill(os.getppid(), 9)\n" + model,
        header + "import os\nos._exit(0)\n" + model,
        header + model.replace("return torch.relu(x)", "return torch.empty(0)"),
        header + model.replace("torch.randn(8, 8)", "torch.randn(1 << 40)"),
        header + "exec(bytes.fromhex('696d706f7274206f73').decode())\n" + model,
        "def f(:\n",
        header + "x = " + "(" * 500 + ")" * 500 + "\n" + model,
    ]


# ---- wire encoding, for what the protobuf library will not build ----


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def length_delimited(number: int, data: bytes) -> bytes:
    return varint((number << 3) | 2) + varint(len(data)) + data


def nested_groups(number: int, depth: int) -> bytes:
    """`depth` unknown groups nested in one another (wire types 3 and 4)."""
    return varint((number << 3) | 3) * depth + varint((number << 3) | 4) * depth


# ---- the generator ----


class CaseGenerator:
    """Seeded: the same seed and count give the same cases."""

    def __init__(self, seed: int, source: str, canary: str, archives: list[bytes]) -> None:
        self.rng = random.Random(seed)
        self.source = source
        self.canary = canary
        self.strings = hostile_strings(canary)
        self.hostile = hostile_sources(canary)
        self.archives = archives  # well-formed archives to send whole and damaged
        self.methods = methods()

    def cases(self, count: int) -> Iterator[Case]:
        for index in range(count):
            method = self.methods[index % len(self.methods)]  # every method, evenly
            weights = method_weights(method)
            kind = self.rng.choices(list(weights), list(weights.values()))[0]
            yield self._case(index, method, kind)

    def _case(self, index: int, method: Method, kind: str) -> Case:
        rng = self.rng
        if kind == "valid":
            return self._deferred(index, method, kind, self._valid_fields())
        if kind == "fields":
            message = self._random_message(method.request.DESCRIPTOR, depth=0)
            return Case(index, method, kind, message.SerializeToString())
        if kind == "out_of_range":
            return self._deferred(index, method, kind, self._out_of_range())
        if kind == "oversized":
            return Case(index, method, kind, self._oversized(method))
        if kind == "invalid_utf8":
            return Case(index, method, kind, self._invalid_utf8(method))
        if kind == "random_bytes":
            size = rng.choice([0, 1, 2, 5, 16, 100, 1000, 65536])
            return Case(index, method, kind, rng.randbytes(size))
        if kind == "truncated":
            whole = self._valid_request(method, [f"run-{rng.getrandbits(48):012x}"])
            cut = rng.randrange(0, max(1, len(whole)))
            return Case(index, method, kind, whole[:cut], note=f"{cut}/{len(whole)} bytes")
        if kind == "mutated":
            whole = bytearray(self._valid_request(method, [f"run-{rng.getrandbits(48):012x}"]))
            for _ in range(rng.randint(1, 8)):
                op = rng.randrange(3)
                at = rng.randrange(0, len(whole) + 1)
                if op == 0 and whole:
                    whole[min(at, len(whole) - 1)] ^= 1 << rng.randrange(8)
                elif op == 1:
                    whole[at:at] = rng.randbytes(rng.randint(1, 8))
                elif whole:
                    del whole[at : at + rng.randint(1, 4)]
            return Case(index, method, kind, bytes(whole))
        if kind == "wrong_type":
            other = rng.choice([m for m in self.methods if m.request is not method.request])
            return Case(
                index, method, kind, self._valid_request(other, ["run-000000000001"]), note=other.name
            )
        if kind == "deep_nesting":
            depth = rng.choice([50, 99, 100, 101, 1000, 5000])
            prefix = self._valid_request(method, ["run-000000000002"])
            return Case(
                index, method, kind, prefix + nested_groups(rng.randint(20, 500), depth), note=str(depth)
            )
        if kind == "hostile_task":
            source = rng.choice(self.hostile)
            return self._deferred(index, method, kind, {"source": source}, timeout_s=180.0)
        if kind == "archive":
            return self._deferred(index, method, kind, {"archive": rng.randrange(6)}, timeout_s=120.0)
        if kind == "deadline":
            return self._deferred(
                index, method, kind, self._valid_fields(), timeout_s=rng.choice([0.0005, 0.002, 0.01])
            )
        assert kind == "cancel_stream"
        return self._deferred(index, method, kind, self._valid_fields(), timeout_s=60.0)

    def _deferred(
        self, index: int, method: Method, kind: str, choices: dict[str, Any], timeout_s: float = 60.0
    ) -> Case:
        # what the payload draws at send time comes from the case's own generator, so the campaign's
        # sequence of cases does not depend on when each is sent
        own = random.Random(self.rng.getrandbits(64))

        def build(run_ids: list[str]) -> bytes:
            return self._build(method, kind, choices, run_ids, own)

        return Case(index, method, kind, None, build=build, timeout_s=timeout_s)

    # the random choices of a deferred case are drawn when the case is made, so the sequence of cases
    # does not depend on the server's answers; only the ids filled in do
    def _valid_fields(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "pick": rng.random(),
            "fresh": f"run-{rng.getrandbits(48):012x}",
            "iterations": rng.choice([1, 1, 2]),
            "population": rng.choice([0, 1, 2]),
            "islands": rng.choice([0, 1]),
            "seed": rng.getrandbits(32),
            "status": rng.choice(["", "running", "finished", "failed", "cancelled", "stopped"]),
            "limit": rng.choice([0, 1, 10]),
            "group_by": rng.choice(["", "generator", "run"]),
            "depth": rng.choice([0, 1, 5]),
            "submit": rng.random() < 0.25,  # most valid SubmitRuns are made invalid below: runs cost CPU
            "breaker": rng.randrange(6),
        }

    def _out_of_range(self) -> dict[str, Any]:
        rng = self.rng
        choices = self._valid_fields()
        choices["iterations"] = rng.choice([-1, INT32_MIN, 100001, INT32_MAX, 1001])
        choices["population"] = rng.choice([-1, INT32_MIN, 10001, INT32_MAX, 65])
        choices["islands"] = rng.choice([-1, INT32_MIN, 1001, INT32_MAX, 9])
        choices["limit"] = rng.choice([-1, INT32_MIN, 100001, INT32_MAX])
        choices["depth"] = rng.choice([-1, INT32_MIN, 100001, INT32_MAX])
        choices["double"] = rng.choice([*NON_FINITE, -1.0, 1e7, 1e308])
        choices["submit"] = True
        return choices

    def _pick_run(self, choices: dict[str, Any], run_ids: list[str]) -> str:
        if run_ids and choices["pick"] < 0.6:
            return run_ids[int(choices["pick"] / 0.6 * len(run_ids)) % len(run_ids)]
        return str(choices["fresh"])

    def _build(
        self, method: Method, kind: str, choices: dict[str, Any], run_ids: list[str], rng: random.Random
    ) -> bytes:
        if kind == "hostile_task":
            request = service_pb2.SubmitRunRequest()
            request.task.name = "hostile"
            request.task.reference_source = choices["source"]
            request.config.iterations = 1
            request.config.population = 1
            return request.SerializeToString()
        if kind == "archive":
            return self._archive(choices["archive"], rng)
        return self._valid_request(method, run_ids, choices, rng)

    def _valid_request(
        self,
        method: Method,
        run_ids: list[str],
        choices: dict[str, Any] | None = None,
        rng: random.Random | None = None,
    ) -> bytes:
        c = choices or self._valid_fields()
        run_id = self._pick_run(c, run_ids)
        name = method.name
        request = method.request()
        if name == "SubmitRun":
            task = request.task  # type: ignore[attr-defined]
            task.name = "level2_elementwise_chain"
            task.reference_source = self.source
            shape = task.shapes.add(name="small")
            shape.overrides["batch_size"] = "256"
            shape.overrides["dim"] = "4096"
            cfg = request.config  # type: ignore[attr-defined]
            cfg.iterations = c["iterations"]
            cfg.population = c["population"]
            cfg.islands = c["islands"]
            cfg.seed = c["seed"]
            cfg.sweeps = False
            if "double" in c:
                task.tolerance.atol = c["double"]
            if not c["submit"]:
                # one of the ways a submission is wrong; only a quarter of valid cases start a run
                breaker = c["breaker"]
                if breaker == 0:
                    cfg.hardware = "cuda.h200"
                elif breaker == 1:
                    cfg.generator = "nope"
                elif breaker == 2:
                    task.reference_source = "import torch\n"
                elif breaker == 3:
                    shape.overrides["dim"] = "-1"
                elif breaker == 4:
                    task.budget.wall_time_s = -1.0
                else:
                    task.seeds = 65
        elif name in ("ListRuns",):
            request.status = c["status"]  # type: ignore[attr-defined]
            request.limit = c["limit"]  # type: ignore[attr-defined]
        elif name == "GetLineageTree":
            request.candidate_id = f"{run_id}-c0"  # type: ignore[attr-defined]
            request.max_depth = c["depth"]  # type: ignore[attr-defined]
        elif name == "GetBestKernels":
            request.hardware = "cpu.x86_64"  # type: ignore[attr-defined]
        elif name == "GetUsageTotals":
            request.run_id = run_id  # type: ignore[attr-defined]
            request.group_by = c["group_by"]  # type: ignore[attr-defined]
        elif name == "ImportRun":
            request.archive = self._archive(int(c["pick"] * 6), rng or self.rng)  # type: ignore[attr-defined]
        elif "run_id" in method.request.DESCRIPTOR.fields_by_name:
            request.run_id = run_id  # type: ignore[attr-defined]
        return request.SerializeToString()

    def _random_message(self, descriptor: Descriptor, depth: int) -> Message:
        from google.protobuf import message_factory

        message = message_factory.GetMessageClass(descriptor)()
        for f in descriptor.fields:
            if self.rng.random() < 0.35:
                continue
            self._fill(message, f, depth)
        return message

    def _fill(self, message: Message, f: FieldDescriptor, depth: int) -> None:
        rng = self.rng
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            target = getattr(message, f.name)
            value_field = f.message_type.fields_by_name["value"]
            for _ in range(rng.choice([0, 1, 3, 33, 40])):
                key = rng.choice(self.strings) + str(rng.randrange(1000))
                if value_field.type == FieldDescriptor.TYPE_STRING:
                    target[key] = rng.choice(self.strings)
                elif value_field.message_type is None:
                    target[key] = rng.choice(hostile_ints(32))
            return
        if f.is_repeated:
            count = rng.choice([0, 1, 2, 17, 33, 65, 70])
            for _ in range(count):
                if f.message_type is not None:
                    if depth < 3:
                        getattr(message, f.name).add().CopyFrom(
                            self._random_message(f.message_type, depth + 1)
                        )
                else:
                    getattr(message, f.name).append(self._scalar(f))
            return
        if f.message_type is not None:
            if depth < 3:
                getattr(message, f.name).CopyFrom(self._random_message(f.message_type, depth + 1))
            return
        setattr(message, f.name, self._scalar(f))

    def _scalar(self, f: FieldDescriptor) -> Any:
        rng = self.rng
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            if f.name == "reference_source" and rng.random() < 0.3:
                return rng.choice([self.source, *self.hostile])
            return rng.choice(self.strings)
        if t == FieldDescriptor.TYPE_BYTES:
            return rng.choice([b"", b"\x00", rng.randbytes(64), gzip.compress(b"\x00" * (1 << 20))])
        if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
            return rng.choice(hostile_ints(32))
        if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
            return rng.choice(hostile_ints(64))
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return rng.choice([0, 1, 2**32 - 1])
        if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return rng.choice([0, 1, 2**64 - 1])
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return rng.choice(HOSTILE_DOUBLES + NON_FINITE)
        if t == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if t == FieldDescriptor.TYPE_ENUM:
            return rng.choice([0, 1, 2, 3, 4, 99, -1])
        raise ValueError(f"no hostile values for field type {t}")

    def _oversized(self, method: Method) -> bytes:
        rng = self.rng
        size = rng.choice([70_000, 1_100_000, 9 * 1024 * 1024])
        fields = method.request.DESCRIPTOR.fields
        strings = [f for f in fields if f.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)]
        if not strings:  # SubmitRun: the task's reference source (a message field)
            return length_delimited(1, length_delimited(2, b"#" * size))
        target = rng.choice(strings)
        return length_delimited(target.number, b"a" * size)

    def _invalid_utf8(self, method: Method) -> bytes:
        rng = self.rng
        bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"run-\xfe\xfe", b"\xf8\x88\x80\x80\x80"])
        fields = method.request.DESCRIPTOR.fields
        strings = [f for f in fields if f.type == FieldDescriptor.TYPE_STRING]
        if strings:
            return length_delimited(rng.choice(strings).number, bad)
        if method.name == "SubmitRun":  # task.name or task.reference_source
            return length_delimited(1, length_delimited(rng.choice([1, 2, 3]), bad))
        return length_delimited(1, bad)  # ImportRun: bytes, so any bytes are fine there

    def _archive(self, variant: int, rng: random.Random) -> bytes:
        base = self.archives[rng.randrange(len(self.archives))] if self.archives else b""
        if variant == 0 and base:
            return base
        if variant == 1 and base:
            damaged = bytearray(base)
            for _ in range(rng.randint(1, 16)):
                damaged[rng.randrange(len(damaged))] ^= 0xFF
            return bytes(damaged)
        if variant == 2 and base:
            return base[: rng.randrange(1, len(base))]
        if variant == 3:
            return gzip.compress(b"\x00" * (rng.choice([16, 600]) << 20), compresslevel=9)
        if variant == 4:
            return tar_archive({f"../../{self.canary}": b"x", "run.json": b'{"run_id": "/tmp/x"}'})
        return rng.randbytes(rng.choice([1, 100, 4096]))


def tar_archive(files: dict[str, bytes]) -> bytes:
    """A gzip tar holding `files` under the names given (path traversal included)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# ---- the runner ----


def judge(case: Case, code: grpc.StatusCode, details: str, state_dir: str) -> str:
    """Why an answer is a failure, or '' when it is acceptable."""
    if code in CLIENT_MADE:
        if case.kind in ("deadline", "cancel_stream"):
            return ""
        return f"{code.name} on a {case.kind} case: the call hung for {case.timeout_s}s"
    if code not in ACCEPTABLE:
        return f"{code.name}: {details[:300]}"
    if code != grpc.StatusCode.OK:
        if not details.strip():
            return f"{code.name} without a message"
        for leak in (*LEAKS, state_dir):
            if leak and leak in details:
                return f"{code.name} message leaks {leak!r}: {details[:300]}"
    return ""


class Runner:
    """Sends cases to the two servers and keeps what came back; follows up accepted submissions."""

    def __init__(self, evolver_address: str, store_address: str, state_dir: str) -> None:
        options = [
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.max_receive_message_length", 256 * 1024 * 1024),
        ]
        self.channels = {
            "evolver": grpc.insecure_channel(evolver_address, options=options),
            "store": grpc.insecure_channel(store_address, options=options),
        }
        self.state_dir = state_dir
        self.campaign = Campaign()

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()

    def known_runs(self) -> list[str]:
        return self.campaign.accepted_runs + self.campaign.imported_runs

    def send(self, case: Case) -> Outcome:
        method = case.method
        payload = case.bytes_for(self.known_runs())
        channel = self.channels[method.service]
        started = time.monotonic()
        code = grpc.StatusCode.OK
        details = ""
        response: Message | None = None
        try:
            if method.streaming:
                call = channel.unary_stream(method.path, request_serializer=None, response_deserializer=None)
                stream = call(payload, timeout=case.timeout_s)
                for raw in stream:
                    response = method.response.FromString(raw)
                    if case.kind == "cancel_stream":
                        stream.cancel()
                        break
                if case.kind == "cancel_stream" and response is not None:
                    code = grpc.StatusCode.CANCELLED
            else:
                call = channel.unary_unary(method.path, request_serializer=None, response_deserializer=None)
                response = method.response.FromString(call(payload, timeout=case.timeout_s))
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            details = exc.details() or ""  # type: ignore[attr-defined]
        outcome = Outcome(case, code, details, time.monotonic() - started)
        outcome.failure = judge(case, code, details, self.state_dir)
        self.campaign.outcomes.append(outcome)
        if code == grpc.StatusCode.OK and response is not None:
            self._follow_up(method, response)
        return outcome

    def _follow_up(self, method: Method, response: Message) -> None:
        if method.name == "SubmitRun":
            run_id = response.run_id  # type: ignore[attr-defined]
            self.campaign.accepted_runs.append(run_id)
            self._stream_then_cancel(run_id)
        elif method.name == "ImportRun":
            self.campaign.imported_runs.append(response.run_id)  # type: ignore[attr-defined]

    def _stream_then_cancel(self, run_id: str) -> None:
        """An accepted run: its progress stream, cancelled after the first message, then CancelRun."""
        request = service_pb2.StreamRunProgressRequest(run_id=run_id).SerializeToString()
        evolver = self.channels["evolver"]
        try:
            stream = evolver.unary_stream(
                f"/{EVOLVER_SERVICE.full_name}/StreamRunProgress",
                request_serializer=None,
                response_deserializer=None,
            )(request, timeout=30)
            for _ in stream:
                stream.cancel()
                break
            self.campaign.follow_up["StreamRunProgress OK"] += 1
        except grpc.RpcError as exc:
            self.campaign.follow_up[f"StreamRunProgress {exc.code().name}"] += 1  # type: ignore[attr-defined]
        cancel = service_pb2.CancelRunRequest(run_id=run_id).SerializeToString()
        try:
            evolver.unary_unary(
                f"/{EVOLVER_SERVICE.full_name}/CancelRun", request_serializer=None, response_deserializer=None
            )(cancel, timeout=30)
            self.campaign.follow_up["CancelRun OK"] += 1
        except grpc.RpcError as exc:
            self.campaign.follow_up[f"CancelRun {exc.code().name}"] += 1  # type: ignore[attr-defined]


def final_statuses() -> frozenset[int]:
    return frozenset({run_pb2.RUN_STATUS_COMPLETED, run_pb2.RUN_STATUS_CANCELLED, run_pb2.RUN_STATUS_FAILED})


# ---- the campaign ----


@dataclass(frozen=True)
class GrpcFuzzSettings:
    seed: int = 1
    cases: int = 10_000
    # RSS is first read after these (0: a tenth of the cases, at most 500) and once the legitimate run
    # has completed (the services load what a run needs, once: that is no drift)
    warmup_cases: int = 0
    rss_growth_mib: float = 64.0  # most a service's RSS may grow after the warm-up
    settle_s: float = 900.0  # for accepted runs to end and the store to catch up


@dataclass
class GrpcFuzzReport:
    settings: GrpcFuzzSettings
    campaign: Campaign
    canary: str
    rss_warm: dict[str, float]
    rss_end: dict[str, float]
    alive: dict[str, bool]
    starts: dict[str, int]
    not_final: list[str]  # accepted runs that did not end
    running_in_store: list[str]  # runs the lineage still lists as running after the settling
    canary_hits: list[str]
    legit_status: str
    fuzz_s: float
    wall_s: float

    def rss_growth(self) -> dict[str, float]:
        return {n: round(self.rss_end.get(n, 0.0) - w, 1) for n, w in self.rss_warm.items()}

    def problems(self) -> list[str]:
        found = [
            f"case {o.case.index} {o.case.method.name} ({o.case.kind}): {o.failure}"
            for o in self.campaign.failures()
        ]
        found += [f"{name} is not running" for name, up in self.alive.items() if not up]
        found += [f"{name} started {n} times" for name, n in self.starts.items() if n != 1]
        found += [
            f"{name} grew {growth} MiB after the warm-up (limit {self.settings.rss_growth_mib})"
            for name, growth in self.rss_growth().items()
            if growth > self.settings.rss_growth_mib
        ]
        found += [f"accepted run {r} did not end" for r in self.not_final]
        found += [f"run {r} is still running in the lineage" for r in self.running_in_store]
        found += [f"written outside the data folder: {p}" for p in self.canary_hits]
        if self.legit_status != "RUN_STATUS_COMPLETED":
            found.append(f"the legitimate run submitted alongside ended {self.legit_status}")
        return found


def run_grpc_campaign(
    settings: GrpcFuzzSettings, say: Callable[[str], None] = lambda _: None
) -> GrpcFuzzReport:
    """Start a stack, submit one legitimate run, send the cases, then check what the system is left with."""
    from .fuzz_support import (
        alive,
        canary_hits,
        fuzz_stack,
        new_canary,
        restarts_from_logs,
        rss_mib,
        sample_archives,
    )
    from .harness import chaos_tasks

    started = time.monotonic()
    canary = new_canary()
    task = chaos_tasks()[0]
    warmup = settings.warmup_cases or min(500, max(1, settings.cases // 10))
    with fuzz_stack() as (stack, work):
        from kernelfoundry.client import KernelFoundryClient
        from kernelfoundry.stack.hardware import cpu_target

        client = KernelFoundryClient(stack.grpc_address)
        legit = client.submit(
            task, run_pb2.RunConfig(hardware=cpu_target().execute, iterations=1, population=2, seed=7)
        )
        say(f"legitimate run {legit} submitted; canary {canary}")
        generator = CaseGenerator(settings.seed, task.reference_source, canary, sample_archives())
        runner = Runner(stack.grpc_address, stack.store_grpc_address, str(stack.state_dir))
        rss_warm: dict[str, float] = {}
        fuzz_started = time.monotonic()
        try:
            for case in generator.cases(settings.cases):
                outcome = runner.send(case)
                if outcome.failure:
                    say(f"FAILURE case {case.index} {case.method.name} ({case.kind}): {outcome.failure}")
                due = not rss_warm and case.index + 1 >= warmup and (case.index + 1) % 50 == 0
                if due and client.get_run(legit).status in final_statuses():
                    rss_warm = rss_mib(stack)
                    say(f"RSS after {case.index + 1} cases and the legitimate run: {rss_warm}")
                if (case.index + 1) % 500 == 0:
                    say(
                        f"{case.index + 1} cases, {len(runner.campaign.failures())} failures, "
                        f"{len(runner.campaign.accepted_runs)} runs accepted, "
                        f"{time.monotonic() - fuzz_started:.0f} s"
                    )
            fuzz_s = time.monotonic() - fuzz_started
            rss_end = rss_mib(stack)
            rss_warm = rss_warm or rss_end  # the legitimate run outlasted the cases: no drift to measure
            not_final, legit_status = _settle(
                client,
                [*runner.campaign.accepted_runs],
                legit,
                time.monotonic() + settings.settle_s,
            )
            running = _running_in_store(stack, time.monotonic() + settings.settle_s, say)
        finally:
            runner.close()
            client.close()
        report = GrpcFuzzReport(
            settings=settings,
            campaign=runner.campaign,
            canary=canary,
            rss_warm=rss_warm,
            rss_end=rss_end,
            alive=alive(stack),
            starts=restarts_from_logs(stack),
            not_final=not_final,
            running_in_store=running,
            canary_hits=canary_hits(canary, work),
            legit_status=legit_status,
            fuzz_s=fuzz_s,
            wall_s=0.0,
        )
    report.wall_s = time.monotonic() - started
    return report


def _settle(client: Any, accepted: list[str], legit: str, deadline: float) -> tuple[list[str], str]:
    """Wait for every accepted run and the legitimate one to end; (runs that did not, the legit status)."""
    waiting = set(accepted) | {legit}
    statuses: dict[str, int] = {}
    while waiting and time.monotonic() < deadline:
        for run_id in sorted(waiting):
            try:
                status = client.get_run(run_id).status
            except grpc.RpcError:
                continue
            statuses[run_id] = status
            if status in final_statuses():
                waiting.discard(run_id)
        if waiting:
            time.sleep(1.0)
    legit_status = run_pb2.RunStatus.Name(statuses.get(legit, 0))
    return sorted(waiting - {legit}), legit_status


def _running_in_store(stack: Any, deadline: float, say: Callable[[str], None]) -> list[str]:
    """The runs the lineage still lists as running at `deadline`, read once the store has caught up with
    the event history. A run the client never learned of (a submission whose answer came after the
    client's deadline) runs to its end on its own: it is waited for, not cancelled."""
    from .fuzz_support import store_caught_up, store_running_runs

    said: list[str] = []
    while True:
        caught_up = store_caught_up(stack)
        running = store_running_runs(stack) if caught_up else ["(the store has not caught up)"]
        if not running or time.monotonic() > deadline:
            return running
        if running != said:
            said = running
            say(f"waiting for runs the lineage lists as running: {running}")
        time.sleep(5.0)
