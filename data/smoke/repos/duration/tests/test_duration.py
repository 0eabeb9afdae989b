import pytest

from duration import parse_duration


def test_seconds():
    assert parse_duration("90s") == 90


def test_minutes_and_hours():
    assert parse_duration("5m") == 300
    assert parse_duration(" 2h ") == 7200


def test_invalid_raises():
    for bad in ["", "abc", "10", "5x", "m5"]:
        with pytest.raises(ValueError):
            parse_duration(bad)
