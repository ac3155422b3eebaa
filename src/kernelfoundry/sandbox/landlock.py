"""Landlock through ctypes: everything readable, only chosen paths writable, no TCP, no signals out.

Landlock (Linux >= 5.13) lets an unprivileged process restrict itself and every process it starts;
the restriction can never be lifted. What it can enforce grows with its ABI version:
1 file access, 2 renames across folders (REFER), 3 truncate, 4 TCP bind/connect, 5 device ioctls,
6 scopes (abstract Unix sockets, signals to processes outside the domain). `abi_version()` probes it;
`restrict(...)` applies what this kernel supports and says which parts are active.

Only the launcher calls `restrict`, in its own single-threaded process, right before exec.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

from kernelfoundry.sandbox.libc import libc

_SYS_CREATE_RULESET = 444  # the same numbers on every architecture (unified syscall table)
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# File-system access rights, by the ABI version that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_ALL_FS_LATEST = (1 << 16) - 1
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
# Rights that make sense on a file (not a folder); Landlock rejects folder-only rights on files.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed))
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def abi_version() -> int:
    """Landlock's ABI version on this kernel, 0 when Landlock is absent or disabled."""
    try:
        version = libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def handled_fs_rights(abi: int) -> int:
    return _FS_RIGHTS_BY_ABI.get(abi, _ALL_FS_LATEST) if abi > 0 else 0


def restrict(abi: int, writable: Iterable[str], devices: Iterable[str]) -> list[str]:
    """Restrict this process: read everything, write `writable`, use `devices` (read, write, ioctl).

    TCP bind and connect are denied (ABI >= 4), abstract Unix sockets and signals outside the domain
    are scoped (ABI >= 6). Returns the names of the active parts: "landlock-fs", "landlock-net",
    "landlock-scope". Raises OSError when the kernel refuses.
    """
    if abi <= 0:
        return []
    c = libc()
    handled = handled_fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset = c.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise _os_error("landlock_create_ruleset")
    try:
        _allow(c, ruleset, "/", READ_ONLY & handled)
        for path in writable:
            _allow(c, ruleset, path, handled)
        for device in devices:
            _allow(c, ruleset, device, (READ_FILE | WRITE_FILE | IOCTL_DEV) & handled)
        if c.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _os_error("prctl(PR_SET_NO_NEW_PRIVS)")
        if c.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise _os_error("landlock_restrict_self")
    finally:
        os.close(ruleset)
    active = ["landlock-fs"]
    if abi >= 4:
        active.append("landlock-net")
    if abi >= 6:
        active.append("landlock-scope")
    return active


def _allow(c: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # nothing to allow; a path that does not exist cannot be written either
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if c.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise _os_error(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def _os_error(what: str) -> OSError:
    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")
