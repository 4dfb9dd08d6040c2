"""``execute_sql``'s engine-neutral parts: its spec, the call's arguments, the result table.

Each engine runs the tool on its own session: PostgreSQL's in
:mod:`dbaops.dbms.postgres.sql_tool`, TiDB's in :mod:`dbaops.dbms.tidb.sql_session`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from dbaops.tools.base import ToolResult, ToolSpec


def format_rows(rows: Sequence[Row], max_rows: int, max_bytes: int, max_cell: int = 300) -> str:
    """A compact text table with an explicit truncation note."""
    if not rows:
        return "(0 rows)"
    cols = list(rows[0].keys())
    lines = [" | ".join(cols)]
    used = len(lines[0])
    shown = 0
    for row in rows[:max_rows]:
        cells = []
        for v in row.values():
            text = "NULL" if v is None else str(v)
            cells.append(text if len(text) <= max_cell else text[:max_cell] + "…")
        line = " | ".join(cells)
        if used + len(line) + 1 > max_bytes:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    if shown < len(rows):
        lines.append(f"(truncated: {len(rows) - shown} more rows; {len(rows)} rows in total)")
    else:
        lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


class Row(Protocol):
    """What :func:`format_rows` reads of a row (a driver's record, a text row)."""

    def keys(self) -> Iterable[str]: ...

    def values(self) -> Iterable[Any]: ...


def sql_call(args: dict[str, Any], limit_s: float) -> tuple[str, float] | ToolResult:
    """An ``execute_sql`` call's SQL and time limit (at most ``limit_s``), or the error result
    of a call without SQL."""
    sql = str(args.get("sql", "")).strip()
    if not sql:
        return ToolResult(ok=False, error="sql is required", observation="error: sql is required")
    timeout = float(args.get("timeout_s") or limit_s)
    return sql, max(0.1, min(timeout, limit_s))


def failed_call(out: list[str], detail: dict[str, Any], error: str, skipped: int = 0) -> ToolResult:
    """A failed ``execute_sql`` call: what ran, the error, and how many statements did not."""
    if skipped:
        out.append(f"({skipped} later statement(s) not executed)")
    return ToolResult(ok=False, observation="\n".join(out), error=error, detail=detail)


def execute_sql_spec(description: str) -> ToolSpec:
    """The ``execute_sql`` tool's spec, whatever the engine (its description says which)."""
    return ToolSpec(
        name="execute_sql",
        description=description,
        parameters={
            "type": "object",
            "properties": {
                "sql": {"type": "string", "description": "SQL statement(s) to run"},
                "timeout_s": {"type": "number", "description": "optional lower per-call limit"},
            },
            "required": ["sql"],
        },
        read_only=False,
    )
