"""The sandbox policy: environment by allow-list with secrets never passed, its JSON form, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.sandbox import PYTHON_ENV_ALLOW, SandboxError, SandboxPolicy, is_secret_name
from kernelfoundry.sandbox.plan import planned_limits

SCRATCH = Path("/tmp/kf-scratch")
PARENT = {
    "PATH": "/usr/bin",
    "LC_ALL": "C",
    "OMP_NUM_THREADS": "2",
    "CUDA_VISIBLE_DEVICES": "0",
    "HOME": "/root",
    "KF_NATS_URL": "nats://secret-host:4222",
    "AWS_SECRET_ACCESS_KEY": "abc",
    "GITHUB_TOKEN": "ghp",
    "OMP_API_KEY": "sneaky",
    "EDITOR": "vi",
}


def test_python_policy_passes_only_allowed_names_and_sets_home_and_tmpdir_to_scratch() -> None:
    env = SandboxPolicy.for_python(SCRATCH).environment(PARENT)
    assert env["PATH"] == "/usr/bin" and env["LC_ALL"] == "C" and env["OMP_NUM_THREADS"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["HOME"] == str(SCRATCH) and env["TMPDIR"] == str(SCRATCH)
    assert "EDITOR" not in env


@pytest.mark.parametrize("name", ["KF_NATS_URL", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OMP_API_KEY"])
def test_secrets_never_pass_even_when_an_allow_pattern_matches(name: str) -> None:
    policy = SandboxPolicy(scratch=SCRATCH, env_allow=("*",))
    assert name not in policy.environment(PARENT)


def test_env_set_is_the_callers_choice_and_always_applies() -> None:
    policy = SandboxPolicy(scratch=SCRATCH, env_set={"KF_RUNNER_ROLE": "runner", "PATH": "/bin"})
    assert policy.environment(PARENT) == {"KF_RUNNER_ROLE": "runner", "PATH": "/bin"}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("kf_state_dir", True),
        ("MY_SERVICE_PASSWORD", True),
        ("DB_KEY", True),
        ("PATH", False),
        ("LANG", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_no_default_allowed_name_is_a_secret() -> None:
    assert not any(is_secret_name(pattern) for pattern in PYTHON_ENV_ALLOW)


def test_policy_round_trips_through_json() -> None:
    policy = SandboxPolicy.for_python(
        SCRATCH,
        memory_bytes=1 << 30,
        max_processes=64,
        cpu_seconds=10,
        gpu=True,
        writable=(Path("/dev/shm"),),
    )
    assert SandboxPolicy.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not JSON"),
        ('{"format": 9, "scratch": "/tmp"}', "format"),
        ('{"format": 1, "scratch": "/tmp", "allow_network": true}', "allow_network"),
        ('{"format": 1, "scratch": "relative"}', "absolute"),
    ],
)
def test_malformed_policy_json_is_refused_with_its_reason(text: str, fragment: str) -> None:
    with pytest.raises(SandboxError) as caught:
        SandboxPolicy.from_json(text)
    assert caught.value.reason == "bad_policy" and fragment in caught.value.message


@pytest.mark.parametrize("field", ["memory_bytes", "max_processes", "cpu_seconds", "max_open_files"])
def test_non_positive_limits_are_refused_naming_the_field(field: str) -> None:
    with pytest.raises(SandboxError, match=field):
        SandboxPolicy(scratch=SCRATCH, **{field: 0})


def test_cpu_policy_limits_address_space_and_gpu_policy_limits_data_instead() -> None:
    cpu = planned_limits(SandboxPolicy(scratch=SCRATCH, memory_bytes=1 << 30))
    gpu = planned_limits(SandboxPolicy(scratch=SCRATCH, memory_bytes=1 << 30, gpu=True))
    assert cpu["RLIMIT_AS"] == (1 << 30, 1 << 30) and "RLIMIT_DATA" not in cpu
    assert gpu["RLIMIT_DATA"] == (1 << 30, 1 << 30) and "RLIMIT_AS" not in gpu


def test_limits_always_turn_core_dumps_off_and_give_cpu_time_a_kill_margin() -> None:
    plan = planned_limits(SandboxPolicy(scratch=SCRATCH, cpu_seconds=5, max_processes=32, max_open_files=64))
    assert plan["RLIMIT_CORE"] == (0, 0)
    assert plan["RLIMIT_CPU"] == (5, 6)
    assert plan["RLIMIT_NPROC"] == (32, 32) and plan["RLIMIT_NOFILE"] == (64, 64)
