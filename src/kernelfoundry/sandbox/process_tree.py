"""Which processes belong to a sandbox: a /proc snapshot (I/O) and the membership rule (pure).

A process belongs to the sandbox when any of these holds (each catches what the others miss):
- the sandbox's first process is among its ancestors (parent links);
- it is in the sandbox's session (the first process is a session leader);
- it lives in the sandbox's own network namespace, or in its user namespace or one nested inside it:
  a double-forked daemon that called setsid keeps these, and cannot leave them;
- without namespaces, and only when the spawner is a child subreaper: it is an orphan re-parented to
  the spawner, started after the sandbox, and not the first process of another live sandbox.
Processes that started before the sandbox (a recycled pid) and zombies are never members.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

_NS_GET_PARENT = 0xB702  # _IO(0xb7, 0x2)
_MAX_USER_NS_DEPTH = 32


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int
    net_ns: int | None = None
    user_ns_chain: tuple[int, ...] = ()  # its user namespace first, then the parents (when read)


@dataclass(frozen=True)
class SandboxIdentity:
    root_pid: int
    root_start_ticks: int
    session: int
    net_ns: int | None  # None when the sandbox has no network namespace of its own
    user_ns: int | None  # None when the sandbox has no user namespace of its own
    spawner_pid: int
    subreaper: bool = False


def members(
    snapshot: Mapping[int, ProcessInfo], identity: SandboxIdentity, other_roots: Iterable[int] = ()
) -> set[int]:
    """Live (non-zombie) processes of `snapshot` that belong to the sandbox described by `identity`."""
    others = set(other_roots)
    found: set[int] = set()
    for info in snapshot.values():
        if info.state in {"Z", "X"} or info.pid == identity.spawner_pid:
            continue
        if info.start_ticks < identity.root_start_ticks:
            continue
        if _belongs(info, snapshot, identity, others):
            found.add(info.pid)
    return found


def _belongs(
    info: ProcessInfo, snapshot: Mapping[int, ProcessInfo], identity: SandboxIdentity, others: set[int]
) -> bool:
    if info.pid == identity.root_pid or info.sid == identity.session:
        return True
    if identity.net_ns is not None and info.net_ns == identity.net_ns:
        return True
    if identity.user_ns is not None and identity.user_ns in info.user_ns_chain:
        return True
    if _descends_from(info, snapshot, identity.root_pid):
        return True
    no_namespaces = identity.net_ns is None and identity.user_ns is None
    return (
        no_namespaces and identity.subreaper and info.ppid == identity.spawner_pid and info.pid not in others
    )


def _descends_from(info: ProcessInfo, snapshot: Mapping[int, ProcessInfo], root: int) -> bool:
    seen: set[int] = set()
    current: ProcessInfo | None = info
    while current is not None and current.pid not in seen:
        if current.ppid == root:
            return True
        seen.add(current.pid)
        current = snapshot.get(current.ppid)
    return False


def parse_stat(pid: int, text: str) -> ProcessInfo:
    """One /proc/<pid>/stat line (the command name may hold spaces and parentheses)."""
    after_name = text[text.rindex(")") + 2 :].split()
    # Fields from the state on: state ppid pgrp session ... starttime is field 22 (index 19 here).
    return ProcessInfo(
        pid=pid,
        ppid=int(after_name[1]),
        pgid=int(after_name[2]),
        sid=int(after_name[3]),
        state=after_name[0],
        start_ticks=int(after_name[19]),
    )


def read_snapshot(host_user_ns: int | None) -> dict[int, ProcessInfo]:
    """Every process visible in /proc, with its namespaces where this process may read them.

    User namespace parents are followed only for processes outside `host_user_ns` (the spawner's
    own), which keeps the scan cheap: most processes of a host share the spawner's.
    """
    snapshot: dict[int, ProcessInfo] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                info = parse_stat(pid, stat.read())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        chain = _user_ns_chain(pid, host_user_ns)
        snapshot[pid] = replace(info, net_ns=_inode(pid, "net"), user_ns_chain=chain)
    return snapshot


def namespace_inode(pid: int | str, kind: str) -> int | None:
    return _inode(pid, kind)


def _inode(pid: int | str, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _user_ns_chain(pid: int, host_user_ns: int | None) -> tuple[int, ...]:
    try:
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ()
    chain: list[int] = []
    try:
        for _ in range(_MAX_USER_NS_DEPTH):
            inode = os.fstat(fd).st_ino
            chain.append(inode)
            if inode == host_user_ns:
                break
            try:
                parent = fcntl.ioctl(fd, _NS_GET_PARENT)
            except OSError:
                break  # the top, or outside what we may see
            os.close(fd)
            fd = parent
    finally:
        os.close(fd)
    return tuple(chain)
