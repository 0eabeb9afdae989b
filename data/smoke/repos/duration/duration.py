"""Parse human-friendly durations such as "90s", "5m" or "1h30m"."""

import re

_UNITS = {"h": 3600, "m": 60, "s": 1}
def parse_duration(text):
    """Seconds in `text`; raises ValueError when it is not a duration."""
    match = re.fullmatch(r"(\d+)([hms])", text.strip())
    if not match:
        raise ValueError(f"invalid duration: {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]
