"""Least-privilege NATS users: one per service, each allowed exactly the subjects its work needs.

Every user may read the streams' info, use its own durable consumers (create, look up, fetch, acknowledge)
and dead-letter what those consumers deliver; it receives replies only on its own inbox prefix
(`_INBOX.<user>`), so no service reads another's fetched messages or API answers. Beyond that:

  evolver   publishes run, candidate and archive events and the generate/compile requests; lists the
            work stream's consumers (what is served) and reads the store's consumer (resume); creates and
            updates the streams.
  store     reads every event; creates and updates the streams and the artifact bucket, deletes
            artifacts (cleanup of settled candidates).
  llm       publishes generation results; reads back archive updates, run endings and results
            (an ensemble weighs its members by them).
  compiler  publishes build results and execute requests; writes artifacts.
  executor  one user per hardware pool: publishes evaluation results only on its own hardware's result
            subject (`kf.events.evaluation.finished.<hardware>`), reads artifacts. It cannot publish
            another pool's results, any other event or request, nor delete, purge or change a stream.

A pool's executors share the pool's user (the pods of one Deployment share a Secret); the trusted side
checks that a result's claimed hardware is the hardware of the subject it arrived on
(`subjects.result_hardware`) and the hardware its run was sent to.

`render_authorization` writes the `authorization` block of a nats-server configuration; each password is
a variable the server reads from its environment (`$KF_NATS_PASSWORD_<USER>`), filled from a Secret in
Kubernetes. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kernelfoundry.bus import subjects

API = "$JS.API"
# The services that create the streams and bring them to the configured replicas and limits; the others
# only wait for them. No user (the embedded stack's open server) manages them too.
TOPOLOGY_OWNERS = frozenset({"kf-evolver", "kf-store"})
ARTIFACT_STREAM = f"OBJ_{subjects.ARTIFACT_BUCKET}"
STREAMS = (subjects.WORK_STREAM, subjects.EVENTS_STREAM, subjects.DEADLETTER_STREAM)


@dataclass(frozen=True)
class ServiceUser:
    """A NATS user and what it may publish and subscribe to."""

    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    @property
    def password_variable(self) -> str:
        """The environment variable the server reads this user's password from."""
        return "KF_NATS_PASSWORD_" + "".join(c if c.isalnum() else "_" for c in self.name.upper())

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.name)


def inbox_prefix(user: str) -> str:
    """The inbox prefix a service connecting as `user` uses (nats-py `inbox_prefix`)."""
    return f"_INBOX.{user}"


def manages_topology(user: str) -> bool:
    return not user or user in TOPOLOGY_OWNERS


def durable_name(prefix: str, name: str) -> str:
    """The durable consumer of a worker pool: `executor` + `cuda.h200` -> `executor-cuda-h200`."""
    return f"{prefix}-{name.replace('.', '-')}"


def _consumer(stream: str, durable: str, filters: Iterable[str]) -> list[str]:
    """Using one durable consumer, and dead-lettering what it delivers."""
    return [
        f"{API}.CONSUMER.INFO.{stream}.{durable}",
        f"{API}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
        f"{API}.CONSUMER.CREATE.{stream}.{durable}",
        f"{API}.CONSUMER.CREATE.{stream}.{durable}.>",
        f"{API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
        *(subjects.deadletter(f) for f in filters),
    ]


def _read_streams() -> list[str]:
    return [f"{API}.INFO", *(f"{API}.STREAM.INFO.{s}" for s in STREAMS)]


def _manage_streams() -> list[str]:
    streams = (*STREAMS, ARTIFACT_STREAM)
    return [f"{API}.STREAM.{verb}.{s}" for s in streams for verb in ("INFO", "CREATE", "UPDATE")]


def _read_artifacts() -> list[str]:
    # get: the object's metadata by direct or message get, then its chunks through an ordered consumer
    return [
        f"{API}.STREAM.INFO.{ARTIFACT_STREAM}",
        f"{API}.STREAM.NAMES",  # the chunks' consumer looks its stream up by subject
        f"{API}.DIRECT.GET.{ARTIFACT_STREAM}",
        f"{API}.DIRECT.GET.{ARTIFACT_STREAM}.>",
        f"{API}.STREAM.MSG.GET.{ARTIFACT_STREAM}",
        f"{API}.CONSUMER.CREATE.{ARTIFACT_STREAM}",
        f"{API}.CONSUMER.CREATE.{ARTIFACT_STREAM}.>",
        f"{API}.CONSUMER.INFO.{ARTIFACT_STREAM}.>",
        f"{API}.CONSUMER.DELETE.{ARTIFACT_STREAM}.>",
        f"$JS.FC.{ARTIFACT_STREAM}.>",
    ]


def _write_artifacts() -> list[str]:
    # put publishes chunks and metadata, creates the bucket the first time, and purges an object's old
    # chunks when it is replaced; delete is a metadata rollup plus that purge
    return [
        *_read_artifacts(),
        f"$O.{subjects.ARTIFACT_BUCKET}.>",
        f"{API}.STREAM.CREATE.{ARTIFACT_STREAM}",
        f"{API}.STREAM.PURGE.{ARTIFACT_STREAM}",
    ]


def _user(name: str, publish: Iterable[str]) -> ServiceUser:
    return ServiceUser(
        name=name,
        publish=tuple(dict.fromkeys([*_read_streams(), *publish])),
        subscribe=(f"{inbox_prefix(name)}.>",),
    )


def evolver_user() -> ServiceUser:
    events = ("kf.events.run.>", subjects.CANDIDATE_CREATED, subjects.ARCHIVE_UPDATED)
    consumed = (
        subjects.CANDIDATES_GENERATED,
        subjects.CANDIDATE_COMPILED,
        subjects.EVALUATION_FINISHED,
        subjects.EVALUATION_FINISHED_ANY,
    )
    return _user(
        "kf-evolver",
        [
            *events,
            f"{subjects.GENERATE_PREFIX}.>",
            f"{subjects.COMPILE_PREFIX}.>",
            *_consumer(subjects.EVENTS_STREAM, "evolver", consumed),
            f"{API}.CONSUMER.LIST.{subjects.WORK_STREAM}",
            f"{API}.CONSUMER.INFO.{subjects.EVENTS_STREAM}.store",
            *_manage_streams(),
        ],
    )


def store_user() -> ServiceUser:
    return _user(
        "kf-store",
        [
            *_consumer(subjects.EVENTS_STREAM, "store", (f"{subjects.EVENTS_PREFIX}.>",)),
            # artifact cleanup: its own consumer of the results (kernelfoundry.bus.artifact_cleanup)
            *_consumer(
                subjects.EVENTS_STREAM,
                "artifact-cleanup",
                (subjects.EVALUATION_FINISHED, subjects.EVALUATION_FINISHED_ANY),
            ),
            *_manage_streams(),
            *_write_artifacts(),
        ],
    )


# What an llm ensemble reads back to weigh its members and end a finished run's requests (services/llm).
LLM_OUTCOMES = (
    subjects.ARCHIVE_UPDATED,
    subjects.RUN_FINISHED,
    subjects.EVALUATION_FINISHED,
    subjects.EVALUATION_FINISHED_ANY,
)


def llm_user(generators: Sequence[str]) -> ServiceUser:
    consumers = [
        right
        for g in generators
        for right in (
            *_consumer(subjects.WORK_STREAM, f"llm-{g}", (subjects.generate(g),)),
            *_consumer(subjects.EVENTS_STREAM, f"llm-{g}-outcomes", LLM_OUTCOMES),
        )
    ]
    return _user("kf-llm", [subjects.CANDIDATES_GENERATED, *consumers])


def compiler_user(targets: Sequence[str]) -> ServiceUser:
    consumers = [
        right
        for t in targets
        for right in _consumer(subjects.WORK_STREAM, durable_name("compiler", t), (subjects.compile_(t),))
    ]
    return _user(
        "kf-compiler",
        [subjects.CANDIDATE_COMPILED, f"{subjects.EXECUTE_PREFIX}.>", *consumers, *_write_artifacts()],
    )


def executor_user(hardware: str) -> ServiceUser:
    """The user of `hardware`'s executor pool: its queue, its result subject, artifacts to read."""
    return _user(
        executor_user_name(hardware),
        [
            subjects.evaluation_finished(hardware),
            *_consumer(
                subjects.WORK_STREAM, durable_name("executor", hardware), (subjects.execute(hardware),)
            ),
            *_read_artifacts(),
        ],
    )


def executor_user_name(hardware: str) -> str:
    return durable_name("kf-executor", hardware)


def deployment_users(
    generators: Sequence[str], build_targets: Sequence[str], executor_hardware: Sequence[str]
) -> list[ServiceUser]:
    """Every service's user for a deployment with these generators, build targets and executor pools."""
    return [
        evolver_user(),
        store_user(),
        llm_user(generators),
        compiler_user(build_targets),
        *(executor_user(h) for h in executor_hardware),
    ]


def _subjects(values: Iterable[str], indent: str) -> str:
    return "\n".join(f"{indent}{json.dumps(v)}" for v in values)


def render_authorization(users: Sequence[ServiceUser], indent: str = "") -> str:
    """The nats-server `authorization` block for `users` (passwords from `$KF_NATS_PASSWORD_<USER>`)."""
    lines = [f"{indent}authorization {{", f"{indent}  users = ["]
    for user in users:
        lines += [
            f"{indent}    {{",
            f"{indent}      user: {json.dumps(user.name)}",
            f"{indent}      password: ${user.password_variable}",
            f"{indent}      permissions: {{",
            f"{indent}        publish: {{ allow: [",
            _subjects(user.publish, f"{indent}          "),
            f"{indent}        ] }}",
            f"{indent}        subscribe: {{ allow: [",
            _subjects(user.subscribe, f"{indent}          "),
            f"{indent}        ] }}",
            f"{indent}      }}",
            f"{indent}    }}",
        ]
    lines += [f"{indent}  ]", f"{indent}}}"]
    return "\n".join(lines) + "\n"
