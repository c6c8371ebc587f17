"""Structured logging: one structlog configuration for every process of the suite."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

import structlog

# Loggers that follow the level asked for: ours and kopf's (the framework our handlers run in).
# Every other library's (h2, hpack, grpclib, aiohttp, asyncio, kubernetes_asyncio, urllib3...)
# stays at INFO or above: at DEBUG, h2 and hpack alone wrote about 1,100 lines per 30 s of an idle
# node agent (a line per HTTP/2 frame of the self-checks and probes).
OWN_LOGGERS = ("operators", "kopf")
_debug_loggers: set[str] = set()  # named by the last call, to undo in the next one


def debug_logger_names(text: str) -> list[str]:
    """The logger names of ``DRA_LOG_DEBUG_LOGGERS`` (comma-separated; blanks ignored)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def configure_logging(level: str | int = "INFO", fmt: str = "json", debug_loggers: Iterable[str] = ()) -> None:
    """Route structlog and stdlib logging (kopf, aiohttp) through one renderer on stderr.

    ``fmt`` is ``json`` for machines (the default in clusters) or ``console`` for people.
    ``debug_loggers``: loggers (and their children) at DEBUG whatever ``level`` is, such as ``h2``
    or ``grpclib``; other libraries' loggers never go below INFO.
    """
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # kopf passes the object reference as extra={"k8s_ref": ...}; keep only that.
        structlog.stdlib.ExtraAdder(allow=("k8s_ref",)),
    ]
    renderer = structlog.dev.ConsoleRenderer(colors=False) if fmt == "console" else structlog.processors.JSONRenderer()
    # Our own lines skip the stdlib logging machinery (record, handlers, formatter): a quarter
    # of the cost per line, which showed at thousands of lines a second (py-spy, make bench).
    # They are rendered by the same processors, to the same stream, as kopf's stdlib records.
    structlog.configure(
        processors=[*shared[:-1], structlog.processors.format_exc_info, renderer],
        logger_factory=_NamedWriterFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.INFO))
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)
    # kopf logs every successful handler call per object at INFO: noise at our event rates.
    logging.getLogger("kopf.objects").setLevel(max(level, logging.WARNING))
    for name in _debug_loggers - set(debug_loggers):
        logging.getLogger(name).setLevel(logging.NOTSET)
    _debug_loggers.clear()
    for name in debug_loggers:
        logging.getLogger(name).setLevel(logging.DEBUG)
        _debug_loggers.add(name)


class _NamedWriter(structlog.WriteLogger):
    """A structlog writer with the logger's name, for ``add_logger_name``."""

    def __init__(self, name: str):
        super().__init__(sys.stderr)
        self.name = name


class _NamedWriterFactory:
    def __call__(self, *args: object) -> _NamedWriter:
        return _NamedWriter(str(args[0]) if args else "")


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.stdlib.get_logger(name)
