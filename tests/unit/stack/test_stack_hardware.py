"""Hardware detection and the processes `up` starts for it (no GPU needed: nvidia-smi output is given)."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.stack import hardware
from kernelfoundry.stack.hardware import HardwareTarget, cpu_target, parse_gpu_list, visible_targets
from kernelfoundry.stack.supervisor import Stack, executor_processes

SMI = """0, NVIDIA H200, 9.0
1, NVIDIA H200, 9.0
2, NVIDIA A100-SXM4-80GB, 8.0
"""


def test_gpus_of_one_model_share_a_target_and_keep_their_indices() -> None:
    assert parse_gpu_list(SMI) == [
        HardwareTarget("cuda.h200", "cuda.sm90", (0, 1)),
        HardwareTarget("cuda.a100", "cuda.sm80", (2,)),
    ]


def test_unparsable_lines_are_ignored() -> None:
    assert parse_gpu_list("No devices were found\n") == []


def test_up_starts_one_executor_per_gpu_and_one_compiler_for_every_build_target(tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path, hardware=[cpu_target(), *parse_gpu_list(SMI)])
    stack.nats_url = "nats://127.0.0.1:1"
    specs = {s.name: s for s in stack._service_specs()}
    executors = {name: s.env for name, s in specs.items() if name.startswith("executor")}
    assert set(executors) == {
        f"executor:{cpu_target().execute}",
        "executor:cuda.h200:0",
        "executor:cuda.h200:1",
        "executor:cuda.a100:2",
    }
    assert executors["executor:cuda.h200:1"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert executors["executor:cuda.h200:1"]["KF_HARDWARE"] == "cuda.h200"
    assert set(specs["compiler"].env["KF_HARDWARE"].split(",")) == {
        cpu_target().build,
        "cuda.sm90",
        "cuda.sm80",
    }


SMI_WITH_UUIDS = """0, GPU-aaaa1111, NVIDIA H200, 9.0
1, GPU-bbbb2222, NVIDIA H200, 9.0
2, GPU-cccc3333, NVIDIA H200, 9.0
3, GPU-dddd4444, NVIDIA H200, 9.0
"""


def test_uuids_are_kept_beside_the_indices() -> None:
    [h200] = parse_gpu_list(SMI_WITH_UUIDS)
    assert h200.devices == (0, 1, 2, 3)
    assert h200.device_uuids()[2] == (2, "GPU-cccc3333")


def test_cuda_visible_devices_limits_the_gpus_by_index_or_uuid() -> None:
    gpus = parse_gpu_list(SMI_WITH_UUIDS)
    assert visible_targets(gpus, None) == gpus
    assert visible_targets(gpus, "3,1")[0].devices == (1, 3)
    assert visible_targets(gpus, "GPU-cccc")[0].devices == (2,)  # a unique prefix names a device
    assert visible_targets(gpus, "GPU-cccc3333,0")[0].uuids == ("GPU-aaaa1111", "GPU-cccc3333")
    assert visible_targets(gpus, "") == []
    assert visible_targets(gpus, "-1") == []


def test_the_visible_list_ends_at_the_first_entry_naming_no_device_as_for_cuda() -> None:
    gpus = parse_gpu_list(SMI_WITH_UUIDS)
    assert visible_targets(gpus, "1,7,2")[0].devices == (1,)
    assert visible_targets(gpus, "GPU-,2") == []  # a prefix that names every device names none
    assert visible_targets(gpus, "0,0,1")[0].devices == (0,)
    mixed = parse_gpu_list(SMI)
    assert [t.execute for t in visible_targets(mixed, "2")] == ["cuda.a100"]  # a model without devices goes


def test_each_gpu_executor_sees_only_its_device_in_pci_order() -> None:
    planned = executor_processes(parse_gpu_list(SMI_WITH_UUIDS), cpu_executors=0)
    assert [p.name for p in planned] == [f"executor:cuda.h200:{i}" for i in range(4)]
    for index, process in enumerate(planned):
        assert process.env["CUDA_VISIBLE_DEVICES"] == str(index)
        assert process.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA's index is nvidia-smi's
        assert process.env["KF_EXECUTOR_NAME"] == process.name
        assert process.hardware == "cuda.h200"


def test_the_gpu_executor_count_takes_the_first_gpus_and_the_cpu_count_numbers_its_executors() -> None:
    hardware = [cpu_target(), *parse_gpu_list(SMI)]
    planned = executor_processes(hardware, cpu_executors=3, gpu_executors=2)
    cpu = cpu_target().execute
    assert [p.name for p in planned] == [
        f"executor:{cpu}:0",
        f"executor:{cpu}:1",
        f"executor:{cpu}:2",
        "executor:cuda.h200:0",
        "executor:cuda.h200:1",
    ]
    assert all("CUDA_VISIBLE_DEVICES" not in p.env for p in planned[:3])
    assert len({p.env["KF_EXECUTOR_NAME"] for p in planned}) == len(planned)
    assert [p.name for p in executor_processes(hardware, 1)] == [
        f"executor:{cpu}",
        "executor:cuda.h200:0",
        "executor:cuda.h200:1",
        "executor:cuda.a100:2",
    ]


def test_the_stack_serves_only_hardware_it_starts_executors_for(tmp_path: Path) -> None:
    stack = Stack(
        state_dir=tmp_path, hardware=[cpu_target(), *parse_gpu_list(SMI)], cpu_executors=0, gpu_executors=1
    )
    stack.nats_url = "nats://127.0.0.1:1"
    specs = stack._service_specs()
    assert [s.name for s in specs if s.name.startswith("executor")] == ["executor:cuda.h200:0"]
    assert specs[0].env["KF_SERVED_HARDWARE"] == "cuda.h200"
    two_cpus = Stack(state_dir=tmp_path, hardware=[cpu_target()], cpu_executors=2)
    two_cpus.nats_url = "nats://127.0.0.1:1"
    executors = [s for s in two_cpus._service_specs() if s.name.startswith("executor")]
    assert [s.env["KF_EXECUTOR_NAME"] for s in executors] == [s.name for s in executors]
    assert len({s.log_path for s in executors}) == 2
    assert {s.env["KF_HARDWARE"] for s in executors} == {cpu_target().execute}


def test_meminfo_fields_are_bytes_and_counts_without_a_unit_stay_counts() -> None:
    text = "MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\nHugePages_Total:       4\nbad line\n"
    fields = hardware.parse_meminfo(text)
    assert fields == {"MemTotal": 24000000 * 1024, "MemAvailable": 20000000 * 1024, "HugePages_Total": 4}


def test_this_host_s_meminfo_has_its_available_memory() -> None:
    fields = hardware.host_meminfo()
    assert 0 < fields["MemAvailable"] <= fields["MemTotal"]
