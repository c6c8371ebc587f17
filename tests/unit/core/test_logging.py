"""Log levels: ours follow DRA_LOG_LEVEL, other libraries' stay at INFO unless named."""

from __future__ import annotations

import logging

import pytest

from operators.core.logging import configure_logging, debug_logger_names
from operators.core.settings import Settings


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    configure_logging("INFO")
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_at_debug_h2s_debug_lines_stay_out_unless_asked_for_by_name(restore_logging, capsys):
    configure_logging("DEBUG", "json")
    logging.getLogger("h2.connection").debug("frame received")
    logging.getLogger("hpack.hpack").debug("decoded header")
    logging.getLogger("h2.connection").info("an h2 line at INFO")
    logging.getLogger("kopf.reactor").debug("kopf's own debug line")
    logging.getLogger("operators.nodeagent").debug("our own debug line")
    lines = _lines(capsys)
    assert not any("frame received" in line or "decoded header" in line for line in lines), lines
    assert sum("an h2 line at INFO" in line or "debug line" in line for line in lines) == 3, lines

    configure_logging("DEBUG", "json", debug_logger_names(" h2 , grpclib,"))
    logging.getLogger("h2.connection").debug("frame received")
    logging.getLogger("hpack.hpack").debug("decoded header")
    lines = _lines(capsys)
    assert any("frame received" in line for line in lines) and not any("decoded header" in line for line in lines)

    configure_logging("INFO", "json")  # the name is no longer asked for: back to INFO
    logging.getLogger("h2.connection").debug("frame received")
    logging.getLogger("operators.nodeagent").debug("our own debug line")
    assert _lines(capsys) == []


def test_the_setting_reads_logger_names():
    settings = Settings.from_env({"DRA_LOG_DEBUG_LOGGERS": "h2,grpclib.server"})
    assert debug_logger_names(settings.log_debug_loggers) == ["h2", "grpclib.server"]
    assert debug_logger_names(Settings().log_debug_loggers) == []
