"""PostgreSQL's server log format: the line prefix the embedded cluster configures."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

#: The prefix of a server log line (``log_line_prefix = '%m [%p] '``): time, zone, pid.
_LOG_PREFIX = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (UTC|GMT|Z|[+-]\d\d(?::?\d\d)?) \[(\d+)\]"
)


def log_line_stamp(line: str) -> tuple[float, int] | None:
    """The wall time (epoch seconds) and pid of a server log line, or None for a line without
    the prefix (the continuation of a multi-line message)."""
    m = _LOG_PREFIX.match(line)
    if m is None:
        return None
    stamp, zone, pid = m.groups()
    naive = datetime.strptime(
        stamp, "%Y-%m-%d %H:%M:%S.%f" if "." in stamp else "%Y-%m-%d %H:%M:%S"
    )
    return naive.replace(tzinfo=_zone(zone)).timestamp(), int(pid)


def _zone(text: str) -> timezone:
    if text in ("UTC", "GMT", "Z"):
        return UTC
    digits = text[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
    return timezone(-offset if text[0] == "-" else offset)
