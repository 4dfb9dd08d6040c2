"""TiDB's server log format: ``[2026/12/02 19:57:05.496 +00:00] [INFO] [file.go:52] [msg]
[conn=3405774860] ...`` (one record per line)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

_STAMP = re.compile(r"^\[(\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3} [+-]\d{2}:\d{2})\] \[")
_CONN = re.compile(r"\[conn=(\d+)\]")


def log_line_stamp(line: str) -> tuple[float, int] | None:
    """The wall time of a tidb.log line and the connection it names (0: none); None for a
    line without a stamp (a continuation of a multi-line message)."""
    m = _STAMP.match(line)
    if m is None:
        return None
    at = datetime.strptime(m[1], "%Y/%m/%d %H:%M:%S.%f %z").timestamp()
    conn = _CONN.search(line)
    return at, int(conn[1]) if conn else 0


_SLOW_TIME = re.compile(r"^# Time: (\S+)")


def slow_log_stamp(line: str) -> tuple[float, int] | None:
    """The wall time of a slow-log record's first line (``# Time: 2026-12-02T20:01:02.1+00:00``);
    None for the record's other lines."""
    m = _SLOW_TIME.match(line)
    if m is None:
        return None
    return datetime.fromisoformat(m[1]).timestamp(), 0


#: The harness's own TiDB user (its checks, sampler and fixture run as ``root``).
HARNESS_USER = "root"


def without_harness_lines(lines: list[str], user: str = HARNESS_USER) -> list[str]:
    """tidb.log as the agent reads it: without the lines TiDB tags with the harness's user
    (its checks' SQL is scenario internals)."""
    tag = f"[user={user}]"
    return [line for line in lines if tag not in line]


def without_harness_records(lines: list[str], user: str = HARNESS_USER) -> list[str]:
    """The slow log as the agent reads it: without the records of the harness's user (its
    checks' SQL, and TiDB's internal statements, which run as that user too)."""
    marker = f"# User@Host: {user}["
    out: list[str] = []
    record: list[str] = []
    for line in [*lines, "# Time: end"]:
        if line.startswith("# Time: "):
            if not any(r.startswith(marker) for r in record):
                out.extend(record)
            record = []
        record.append(line)
    return out


def forget_harness_records(slow_log: Path, user: str = HARNESS_USER) -> None:
    """Take the harness user's records out of the slow log file in place: the agent's PROCESS
    privilege reads the file through ``information_schema.slow_query`` (which no filter of
    ``read_log`` reaches), and a preparation's slow statements would tell it what was done.
    The server appends to the same file afterwards."""
    if not slow_log.exists():
        return
    with slow_log.open("r+", encoding="utf-8", errors="surrogateescape") as fh:
        kept = without_harness_records(fh.read().splitlines())
        fh.seek(0)
        fh.truncate()
        fh.write("".join(line + "\n" for line in kept))
