"""A workload library's SQL script, run statement by statement on any engine's session."""

from __future__ import annotations

from typing import Any, Protocol


class _Executes(Protocol):
    async def execute(self, query: str, *args: Any) -> Any: ...


async def execute_script(conn: _Executes, sql: str) -> None:
    """The statements of a script, one by one (split at a semicolon ending a line)."""
    # VACUUM cannot run inside the implicit transaction of a multi-statement simple query.
    chunks = [c for c in sql.split(";\n") if c.strip()]
    for chunk in chunks:
        await conn.execute(chunk)
