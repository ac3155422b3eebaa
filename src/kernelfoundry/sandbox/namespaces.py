"""Cutting the network off: a fresh network namespace (inside a fresh user namespace when possible).

A new network namespace holds only a loopback interface that is down: no route anywhere, not even to
the parent's 127.0.0.1 or its abstract Unix sockets. File descriptors passed in (a socketpair, a
pipe) keep working, since they do not depend on the namespace.

The user namespace comes first on purpose, even for root: inside it the process keeps its uid (mapped
onto itself) but holds no capability over anything outside, and RLIMIT_NPROC counts the sandbox's own
processes only. When user namespaces are disabled, a privileged caller still gets CLONE_NEWNET alone.
Only the launcher calls `isolate_network`, in its own single-threaded process, before exec.
"""

from __future__ import annotations

import os

from kernelfoundry.sandbox.libc import libc

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000


def isolate_network(user_namespace: bool = True) -> list[str]:
    """Move this process into new namespaces; returns what is active: ["userns", "netns"], ["netns"] or [].

    `user_namespace=False` skips the user namespace (a host whose GPU stack fails inside one).
    """
    c = libc()
    uid, gid = os.geteuid(), os.getegid()
    if user_namespace and c.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        _map_self(uid, gid)
        return ["userns", "netns"]
    if c.unshare(CLONE_NEWNET) == 0:
        return ["netns"]
    return []


def _map_self(uid: int, gid: int) -> None:
    """Map our own uid and gid onto themselves inside the new user namespace."""
    with open("/proc/self/setgroups", "w") as setgroups:  # required before an unprivileged gid_map
        setgroups.write("deny")
    with open("/proc/self/uid_map", "w") as uid_map:
        uid_map.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as gid_map:
        gid_map.write(f"{gid} {gid} 1")
