"""What the judge can see of the runner from outside, through /proc: CPU time and processes.

Trusted observations (the kernel reports them; the runner cannot forge them): the CPU time every thread
of a process has consumed and the time it spent runnable but waiting for a CPU (the scheduler's run
queue delay; /proc/<pid>/task/*/schedstat, nanoseconds), the CPU time of every other task on the host
(to bound how much of a wait other processes can explain), and the children of a process
(/proc/<pid>/task/*/children, or a scan of /proc/*/stat where that file is absent). What they cannot
see: work on a GPU (device time is not CPU time), or work done by another process that is no child of the
runner or the judge. Reading is racy by nature (threads come and go): a vanished file counts as zero.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def cpu_time_ns(pid: int) -> int:
    """CPU time consumed so far by every live thread of `pid` (0 when the process is gone)."""
    return sum(cpu_time_split_ns(pid))


def process_cpu_ns(pid: int) -> int:
    """CPU time of the whole process, exited threads included (utime + stime of /proc/<pid>/stat: clock
    ticks, so coarse: TICK_NS); 0 when the process is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
        fields = text[text.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) * TICK_NS
    except (OSError, ValueError, IndexError):
        return 0


def cpu_time_split_ns(pid: int) -> tuple[int, int]:
    """CPU time consumed so far by `pid`'s main thread, and by its other live threads ((0, 0) when gone)."""
    main = others = 0
    try:
        tasks = os.listdir(PROC / str(pid) / "task")
    except OSError:
        return 0, 0
    for tid in tasks:
        try:
            with open(PROC / str(pid) / "task" / tid / "schedstat", encoding="ascii") as stat:
                spent = int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if tid == str(pid):
            main += spent
        else:
            others += spent
    return main, others


def thread_schedule_ns(pid: int) -> dict[int, tuple[int, int]]:
    """Per live thread of `pid`: (CPU time, time spent runnable on a run queue waiting for a CPU), in ns.
    Empty when the process is gone."""
    found: dict[int, tuple[int, int]] = {}
    try:
        tasks = os.listdir(PROC / str(pid) / "task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(PROC / str(pid) / "task" / tid / "schedstat", encoding="ascii") as stat:
                fields = stat.read().split()
            found[int(tid)] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):
            continue
    return found


def other_tasks_cpu_ns(excluded: frozenset[int]) -> dict[int, int]:
    """CPU time consumed so far by every thread on the host outside the processes `excluded` (pids),
    keyed by thread id. A thread that ends between two readings is missing from the second (its time
    is lost, never invented)."""
    found: dict[int, int] = {}
    for entry in os.listdir(PROC):
        if not entry.isdigit() or int(entry) in excluded:
            continue
        try:
            tasks = os.listdir(PROC / entry / "task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(PROC / entry / "task" / tid / "schedstat", encoding="ascii") as stat:
                    found[int(tid)] = int(stat.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return found


def cpu_used_between(before: dict[int, int], after: dict[int, int]) -> int:
    """CPU time the threads of `after` used since `before` (a thread new in `after` counts from 0)."""
    return sum(max(0, spent - before.get(tid, 0)) for tid, spent in after.items())


def _children_from_tasks(pid: int) -> set[int] | None:
    try:
        tasks = os.listdir(PROC / str(pid) / "task")
    except OSError:
        return set()
    found: set[int] = set()
    for tid in tasks:
        path = PROC / str(pid) / "task" / tid / "children"
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            if not path.parent.exists():
                continue
            return None  # the kernel has no children files: scan instead
        except OSError:
            continue
        found.update(int(p) for p in text.split())
    return found


def _children_by_scan(pids: tuple[int, ...]) -> dict[int, set[int]]:
    wanted = {str(p): p for p in pids}
    found: dict[int, set[int]] = {p: set() for p in pids}
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            with open(PROC / entry / "stat", encoding="ascii", errors="replace") as stat:
                text = stat.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the command name, which is in parentheses and may hold spaces.
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] in wanted:
            found[wanted[fields[1]]].add(int(entry))
    return found


def children_of(pids: tuple[int, ...]) -> dict[int, set[int]]:
    """Live (or zombie) direct children of each of `pids`, in one pass over /proc where needed."""
    direct = {pid: _children_from_tasks(pid) for pid in pids}
    if all(found is not None for found in direct.values()):
        return {pid: found for pid, found in direct.items() if found is not None}
    return _children_by_scan(pids)


def children(pid: int) -> set[int]:
    """Live (or zombie) direct children of `pid`."""
    return children_of((pid,))[pid]
