"""Behaviour of configure_logging: JSON lines with service and ISO time, stdlib routed, bad values named."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
import structlog

from kernelfoundry.telemetry.logging import configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_carry_service_level_logger_and_iso_utc_timestamp() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", "compiler", stream=stream)
    get_logger("kernelfoundry.compiler").info("build_finished", hardware="cpu.x86_64", seconds=1.5)
    (record,) = _lines(stream)
    assert record["event"] == "build_finished"
    assert record["service"] == "compiler"
    assert record["level"] == "info"
    assert record["logger"] == "kernelfoundry.compiler"
    assert record["hardware"] == "cpu.x86_64"
    assert record["seconds"] == 1.5
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", str(record["timestamp"]))


def test_stdlib_logging_goes_through_the_same_json_renderer() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", "executor", stream=stream)
    logging.getLogger("nats.aio.client").warning("reconnecting to %s", "nats://kf-nats:4222")
    (record,) = _lines(stream)
    assert record["event"] == "reconnecting to nats://kf-nats:4222"
    assert record["service"] == "executor"
    assert record["logger"] == "nats.aio.client"
    assert record["level"] == "warning"


def test_records_below_the_level_are_dropped() -> None:
    stream = io.StringIO()
    configure_logging("warning", "json", "store", stream=stream)
    get_logger("x").info("not_shown")
    logging.getLogger("y").debug("not shown either")
    get_logger("x").error("shown")
    assert [r["event"] for r in _lines(stream)] == ["shown"]


def test_exceptions_are_rendered_as_data_without_frame_locals() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", "llm", stream=stream)
    api_key = "sk-secret-value"
    try:
        raise ValueError(f"bad response of length {len(api_key)}")
    except ValueError:
        get_logger("kernelfoundry.llm").exception("generation_failed")
    (record,) = _lines(stream)
    assert record["exception"][0]["exc_type"] == "ValueError"  # type: ignore[index]
    assert "sk-secret-value" not in stream.getvalue()


def test_bound_values_and_context_variables_appear_in_records() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", "evolver", stream=stream)
    structlog.contextvars.bind_contextvars(run="run-7")
    try:
        get_logger("kernelfoundry.evolver", task="matmul").info("generation_started")
    finally:
        structlog.contextvars.clear_contextvars()
    (record,) = _lines(stream)
    assert record["task"] == "matmul"
    assert record["run"] == "run-7"


def test_console_format_is_human_readable_not_json() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "console", "compiler", stream=stream)
    get_logger("x").info("build_finished", hardware="cpu.x86_64")
    text = stream.getvalue()
    assert "build_finished" in text and "hardware=cpu.x86_64" in text and "service=compiler" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])


def test_configuring_twice_replaces_the_handler_instead_of_duplicating_lines() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("INFO", "json", "store", stream=first)
    configure_logging("INFO", "json", "store", stream=second)
    get_logger("x").info("once")
    assert first.getvalue() == ""
    assert len(_lines(second)) == 1


def test_unknown_level_is_rejected_with_its_value_named() -> None:
    with pytest.raises(ValueError, match=r"invalid_log_level: KF_LOG_LEVEL='loud'"):
        configure_logging("loud", "json", "store")


def test_unknown_format_is_rejected_with_its_value_named() -> None:
    with pytest.raises(ValueError, match=r"invalid_log_format: KF_LOG_FORMAT='xml'"):
        configure_logging("INFO", "xml", "store")  # type: ignore[arg-type]
