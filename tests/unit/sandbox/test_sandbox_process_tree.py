"""Which processes belong to a sandbox (pure rule over a /proc snapshot) and /proc/<pid>/stat parsing."""

from __future__ import annotations

from kernelfoundry.sandbox.process_tree import ProcessInfo, SandboxIdentity, members, parse_stat

SPAWNER = 100
ROOT = 200
NET, USER, HOST_NET, HOST_USER = 9001, 9002, 1, 2


def proc(
    pid: int,
    ppid: int,
    sid: int,
    *,
    net: int = HOST_NET,
    users: tuple[int, ...] = (HOST_USER,),
    start: int = 50,
    state: str = "S",
) -> ProcessInfo:
    return ProcessInfo(pid, ppid, sid, sid, state, start, net, users)


def identity(**overrides: object) -> SandboxIdentity:
    values = {
        "root_pid": ROOT,
        "root_start_ticks": 10,
        "session": ROOT,
        "net_ns": NET,
        "user_ns": USER,
        "spawner_pid": SPAWNER,
        "subreaper": False,
    }
    values.update(overrides)
    return SandboxIdentity(**values)  # type: ignore[arg-type]


def snapshot(*infos: ProcessInfo) -> dict[int, ProcessInfo]:
    return {info.pid: info for info in infos}


BASE = (proc(1, 0, 1, start=0), proc(SPAWNER, 1, SPAWNER, start=5), proc(300, 1, 300))


def test_children_and_grandchildren_of_the_first_process_belong() -> None:
    tree = snapshot(*BASE, proc(ROOT, SPAWNER, ROOT), proc(201, ROOT, 999), proc(202, 201, 998))
    assert members(tree, identity(net_ns=None, user_ns=None)) == {ROOT, 201, 202}


def test_a_setsid_daemon_reparented_to_init_is_found_by_its_namespaces() -> None:
    daemon = proc(250, 1, 250, net=NET, users=(USER, HOST_USER))
    assert members(snapshot(*BASE, daemon), identity()) == {250}


def test_a_daemon_in_a_nested_user_namespace_is_still_found() -> None:
    nested = proc(251, 1, 251, net=7777, users=(8888, USER, HOST_USER))
    assert members(snapshot(*BASE, nested), identity()) == {251}


def test_processes_in_the_same_session_belong() -> None:
    assert members(snapshot(*BASE, proc(260, 1, ROOT)), identity(net_ns=None, user_ns=None)) == {260}


def test_unrelated_processes_zombies_the_spawner_and_recycled_pids_do_not_belong() -> None:
    zombie = proc(270, 1, 270, net=NET, state="Z")
    recycled = proc(271, 1, 271, net=NET, start=5)
    assert members(snapshot(*BASE, zombie, recycled), identity()) == set()


def test_subreaper_orphans_belong_only_without_namespaces_and_not_when_another_sandbox_root() -> None:
    orphan = proc(280, SPAWNER, 280)
    other_root = proc(281, SPAWNER, 281)
    tree = snapshot(*BASE, orphan, other_root)
    found = members(tree, identity(net_ns=None, user_ns=None, subreaper=True), other_roots=[281])
    assert found == {280}
    assert members(tree, identity(subreaper=True)) == set()
    assert members(tree, identity(net_ns=None, user_ns=None, subreaper=False)) == set()


def test_parse_stat_reads_a_command_name_with_spaces_and_parentheses() -> None:
    fields = " ".join(["S", "7", "8", "9"] + ["0"] * 15 + ["4242", "0"])
    info = parse_stat(55, f"55 (evil ) name) {fields}")
    assert (info.pid, info.state, info.ppid, info.pgid, info.sid, info.start_ticks) == (
        55,
        "S",
        7,
        8,
        9,
        4242,
    )
