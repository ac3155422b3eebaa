"""The embedded stack's NATS users (`Stack(nats_users=True)`): each service its own user and password,
the server's configuration holding exactly those users; off by default."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.bus.permissions import executor_user_name
from kernelfoundry.config import Settings
from kernelfoundry.stack.hardware import cpu_target, parse_gpu_list
from kernelfoundry.stack.supervisor import Stack

SMI = "0, NVIDIA H200, 9.0\n1, NVIDIA H200, 9.0\n"


def _specs(stack: Stack) -> dict[str, dict[str, str]]:
    stack.grpc_address = stack.store_grpc_address = "127.0.0.1:1"
    return {spec.name: spec.env for spec in stack._service_specs()}


def test_every_service_gets_its_own_user_and_the_server_knows_them_all(tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path, hardware=[cpu_target(), *parse_gpu_list(SMI)], nats_users=True)
    stack.cpu_executors, stack.gpu_executors = 1, 2
    config, server_env = stack._nats_auth(Settings())
    specs = _specs(stack)
    users = {name: env["KF_NATS_USER"] for name, env in specs.items()}
    assert (
        users["store"] == "kf-store"
        and users["evolver"] == "kf-evolver"
        and users["compiler"] == "kf-compiler"
    )
    for name, env in specs.items():
        if name.startswith("executor"):
            assert users[name] == executor_user_name(env["KF_HARDWARE"])
    for env in specs.values():
        assert f'user: "{env["KF_NATS_USER"]}"' in config
        assert env["KF_NATS_PASSWORD"] in server_env.values()
    passwords = {
        env["KF_NATS_PASSWORD"] for name, env in specs.items() if not name.startswith("executor:cuda")
    }
    assert len(passwords) == len({users[n] for n in specs if not n.startswith("executor:cuda")})
    assert "kf-executor-cuda-h200" in config  # one user for the two GPU executors' pool


def test_the_default_stack_has_an_open_server_and_no_users(tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path, hardware=[cpu_target()])
    stack.cpu_executors, stack.gpu_executors = 1, 0
    assert all("KF_NATS_USER" not in env for env in _specs(stack).values())
