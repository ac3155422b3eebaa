"""Structured logging for every KernelFoundry service: structlog, JSON lines on stderr by default.

`configure_logging` is called once by each entry point. It binds the service name into every record,
stamps ISO-8601 UTC timestamps, and routes the standard library's `logging` (nats-py, grpc, asyncio, ...)
through the same renderer, so one process writes one format. `console` is for people at a terminal.

This module must never print secrets: callers log identifiers and reason codes, not API keys, and it must
never be imported for side effects (nothing is configured until `configure_logging` runs).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import EventDict, Processor, WrappedLogger

LogFormat = Literal["json", "console"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_HANDLER_NAME = "kernelfoundry"


def _bind_service(service: str) -> Processor:
    def add_service(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
        event_dict.setdefault("service", service)
        return event_dict

    return add_service


def _parse_level(level: str) -> int:
    name = level.strip().upper()
    if name == "WARN":
        name = "WARNING"
    if name not in LOG_LEVELS:
        expected = ", ".join(LOG_LEVELS)
        raise ValueError(f"invalid_log_level: KF_LOG_LEVEL={level!r}; expected one of {expected}")
    return logging.getLevelNamesMapping()[name]


def configure_logging(
    level: str = "INFO",
    fmt: LogFormat = "json",
    service: str = "kernelfoundry",
    *,
    stream: TextIO | None = None,
) -> None:
    """Configure structlog and the standard library's root logger for this process.

    Safe to call again (tests, `kernelfoundry up` re-configuring after argument parsing): the previous
    handler installed here is replaced, handlers installed by others are left alone. Raises ValueError
    naming the bad value for an unknown level or format.
    """
    numeric_level = _parse_level(level)
    if fmt not in LOG_FORMATS:
        expected = ", ".join(LOG_FORMATS)
        raise ValueError(f"invalid_log_format: KF_LOG_FORMAT={fmt!r}; expected one of {expected}")

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _bind_service(service),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
        structlog.processors.StackInfoRenderer(),
    ]
    final: list[Processor] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if fmt == "json":
        # Tracebacks as data, without frame locals: locals can hold API keys and whole kernel sources.
        tracebacks = ExceptionDictTransformer(show_locals=False)
        final += [structlog.processors.ExceptionRenderer(tracebacks), structlog.processors.JSONRenderer()]
    else:
        final += [structlog.dev.ConsoleRenderer(colors=False)]

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.UnicodeDecoder(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )

    formatter = structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=final)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(numeric_level)


def get_logger(name: str | None = None, **initial: Any) -> structlog.stdlib.BoundLogger:
    """A structlog logger named after its module, with `initial` key-values bound."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger.bind(**initial) if initial else logger
