"""What a preparation leaves in ``pg_stat_statements``: only what an agent may see.

A scenario's construction runs its faults' statements (the bad batch, the ``ALTER TABLE`` that
disabled autovacuum); kept in the dirty snapshot, they would hand the agent the answer, or tell
it which sessions the harness made. The preparation notes the statistics before construction
and, after it, resets every entry construction added or ran, so the snapshot's statistics are
the fixture's and the workload history's only.
"""

from __future__ import annotations

import asyncpg

from dbaops.dbms.postgres.metrics_sql import quote_ident

StatementKey = tuple[int, int, int]


async def _schema(conn: asyncpg.Connection) -> str | None:
    schema: str | None = await conn.fetchval(
        "SELECT n.nspname FROM pg_catalog.pg_extension e "
        "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_stat_statements'"
    )
    return schema


async def _counts(conn: asyncpg.Connection, schema: str) -> dict[StatementKey, int]:
    rows = await conn.fetch(
        f"SELECT userid, dbid, queryid, calls FROM {quote_ident(schema)}.pg_stat_statements(false)"
    )
    return {(r["userid"], r["dbid"], r["queryid"]): r["calls"] for r in rows}


async def statement_counts(conn: asyncpg.Connection) -> dict[StatementKey, int] | None:
    """Calls of every (userid, dbid, queryid) entry now (None without the extension)."""
    schema = await _schema(conn)
    return None if schema is None else await _counts(conn, schema)


async def forget_statements_since(
    conn: asyncpg.Connection, before: dict[StatementKey, int] | None
) -> int:
    """Reset every entry that is new or ran since ``before`` (a superuser session); returns
    how many."""
    schema = await _schema(conn)
    if before is None or schema is None:
        return 0
    after = await _counts(conn, schema)
    changed = [key for key, calls in after.items() if before.get(key) != calls]
    reset = f"{quote_ident(schema)}.pg_stat_statements_reset($1::oid, $2::oid, $3::bigint)"
    for userid, dbid, queryid in changed:
        await conn.execute(f"SELECT {reset}", userid, dbid, queryid)
    return len(changed)
