"""The per-service NATS users (pure): who may publish what, and the server configuration they render to."""

from __future__ import annotations

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.events import ForeignResult, decode_event
from kernelfoundry.bus.permissions import (
    compiler_user,
    deployment_users,
    evolver_user,
    executor_user,
    llm_user,
    manages_topology,
    render_authorization,
    store_user,
)
from kernelfoundry.v1 import evaluation_pb2


def test_an_executor_pool_publishes_results_only_on_its_own_subject() -> None:
    cpu = executor_user("cpu.x86_64")
    assert subjects.evaluation_finished("cpu.x86_64") in cpu.publish
    assert not [s for s in cpu.publish if s.startswith(subjects.EVENTS_PREFIX) and "cpu" not in s]
    changes = (".STREAM.CREATE.", ".STREAM.UPDATE.", ".STREAM.DELETE.", ".PURGE.", ".CONSUMER.DELETE.KF_")
    assert not [s for s in cpu.publish if any(c in s for c in changes)]
    assert not [s for s in cpu.publish if ">" in s and s.startswith("kf.")]


def test_only_the_trusted_services_manage_streams() -> None:
    for user in deployment_users(["heuristic"], ["cpu.x86_64"], ["cpu.x86_64"]):
        creates = any(s.startswith("$JS.API.STREAM.CREATE.KF_") for s in user.publish)
        assert creates == manages_topology(user.name) == (user.name in ("kf-evolver", "kf-store")), user.name
    assert manages_topology("")  # the embedded stack's open server


def test_no_user_may_delete_a_stream() -> None:
    for user in deployment_users(["heuristic", "openai"], ["cpu.x86_64", "cuda.sm90"], ["cuda.h200"]):
        assert not [s for s in user.publish if ".STREAM.DELETE." in s], user.name


def test_each_service_publishes_what_it_produces() -> None:
    assert subjects.CANDIDATES_GENERATED in llm_user(["heuristic"]).publish
    assert "$JS.API.CONSUMER.MSG.NEXT.KF_WORK.llm-heuristic" in llm_user(["heuristic"]).publish
    compiler = compiler_user(["cuda.sm90"])
    assert {subjects.CANDIDATE_COMPILED, "kf.execute.>", "$O.kf-artifacts.>"} <= set(compiler.publish)
    assert "$JS.API.CONSUMER.MSG.NEXT.KF_WORK.compiler-cuda-sm90" in compiler.publish
    evolver = evolver_user()
    assert {"kf.events.run.>", "kf.generate.>", "kf.compile.>"} <= set(evolver.publish)
    assert "kf.execute.>" not in evolver.publish
    assert "$JS.API.STREAM.PURGE.OBJ_kf-artifacts" in store_user().publish


def test_passwords_are_server_variables() -> None:
    user = executor_user("cuda.h200")
    assert user.password_variable == "KF_NATS_PASSWORD_KF_EXECUTOR_CUDA_H200"
    text = render_authorization([user])
    assert "password: $KF_NATS_PASSWORD_KF_EXECUTOR_CUDA_H200" in text
    assert '"$JS.API.CONSUMER.MSG.NEXT.KF_WORK.executor-cuda-h200"' in text
    assert '"_INBOX.kf-executor-cuda-h200.>"' in text


def test_the_result_subject_names_its_pool() -> None:
    assert subjects.evaluation_finished("cuda.h200") == "kf.events.evaluation.finished.cuda.h200"
    assert subjects.result_hardware("kf.events.evaluation.finished.cuda.h200") == "cuda.h200"
    assert subjects.result_hardware(subjects.EVALUATION_FINISHED) is None
    assert subjects.is_evaluation_finished(subjects.EVALUATION_FINISHED)
    assert subjects.is_evaluation_finished(subjects.evaluation_finished("cpu.x86_64"))
    assert not subjects.is_evaluation_finished(subjects.CANDIDATE_COMPILED)


def _result(hardware: str) -> bytes:
    return evaluation_pb2.EvaluationFinished(candidate_id="c1", hardware=hardware).SerializeToString()


def test_a_result_from_its_own_pool_decodes() -> None:
    event = decode_event(subjects.evaluation_finished("cpu.x86_64"), _result("cpu.x86_64"))
    assert isinstance(event, evaluation_pb2.EvaluationFinished) and event.hardware == "cpu.x86_64"
    assert decode_event(subjects.EVALUATION_FINISHED, _result("cuda.h200")).hardware == "cuda.h200"


@pytest.mark.parametrize("claimed", ["cuda.h200", "", "cpu"])
def test_a_result_claiming_another_pool_is_refused(claimed: str) -> None:
    with pytest.raises(ForeignResult, match=r"cpu\.x86_64"):
        decode_event(subjects.evaluation_finished("cpu.x86_64"), _result(claimed))


def test_the_generator_prints_the_block_and_a_secret_with_a_password_per_user(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kernelfoundry.bus.nats_users import main

    args = ["--generator", "heuristic", "--build-target", "cpu.x86_64", "--executor", "cpu.x86_64"]
    users = deployment_users(["heuristic"], ["cpu.x86_64"], ["cpu.x86_64"])
    assert main(args) == 0
    assert capsys.readouterr().out == render_authorization(users)
    assert main([*args, "--secret"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  KF_NATS")]
    assert [line.split(":")[0] for line in lines] == [u.password_variable for u in users]
    passwords = [line.split(": ")[1] for line in lines]
    assert len(set(passwords)) == len(passwords) and all(len(p) >= 32 for p in passwords)


def test_the_llm_user_may_read_back_what_its_ensemble_learns_from() -> None:
    from kernelfoundry.services.llm.main import OUTCOME_SUBJECTS, outcomes_durable

    user = llm_user(["ensemble"])
    assert f"$JS.API.CONSUMER.MSG.NEXT.KF_EVENTS.{outcomes_durable('ensemble')}" in user.publish
    for subject in OUTCOME_SUBJECTS:
        assert subjects.deadletter(subject) in user.publish
