import datetime

import pytest

from operators.core.dra.metatime import format_time, parse_time, utcnow

UTC = datetime.UTC


def test_format_is_utc_whole_seconds():
    cet = datetime.timezone(datetime.timedelta(hours=1))
    assert format_time(datetime.datetime(2026, 1, 1, 13, 0, 5, 999999, tzinfo=cet)) == "2026-01-01T12:00:05Z"


def test_parse_reads_what_the_api_server_writes():
    assert parse_time("2026-01-01T12:00:05Z") == datetime.datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    assert parse_time("2026-01-01T13:00:05+01:00").tzinfo == UTC
    assert parse_time(None) is None and parse_time("") is None
    with pytest.raises(ValueError):
        parse_time("yesterday")
    now = utcnow()
    assert parse_time(format_time(now)) == now.replace(microsecond=0)
