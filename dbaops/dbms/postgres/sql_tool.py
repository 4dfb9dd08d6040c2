"""``execute_sql``: the agent's SQL surface (inspection, EXPLAIN, remediation).

Runs on one sticky session as the scenario's agent role, so ``SET`` and transactions carry over
between calls as in psql. Each call is split into statements with pglast (comments and quoting
handled by the real parser); row-returning statements are fetched, the others executed for their
command tag. Results are capped by rows and bytes with an explicit truncation note. The session's
``lock_timeout`` and ``statement_timeout`` before the call are recorded for the safety judge,
with a snapshot of the server's sessions just before it ran (``backends_before``), so the judge
can tell which sessions a ``pg_terminate_backend`` / ``pg_cancel_backend`` actually hit.
"""

from __future__ import annotations

import csv
import io
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import asyncpg
import pglast

from dbaops.dbms.postgres.endpoint import CONNECTION_ERRORS, Endpoint
from dbaops.tools.base import Tool, ToolResult
from dbaops.tools.recording import call_detail
from dbaops.tools.sql import Row, execute_sql_spec, failed_call, format_rows, sql_call

_BACKENDS_SQL = (
    "SELECT pid, usename, application_name, backend_start::text AS backend_start, state, "
    "backend_type FROM pg_stat_activity WHERE pid <> pg_backend_pid() ORDER BY pid"
)

_ROW_STATEMENTS = {"SelectStmt", "ExplainStmt", "VariableShowStmt", "FetchStmt", "CallStmt"}


def split_statements(sql: str) -> list[str]:
    """Statements of ``sql`` as the original text slices; the whole text if it does not parse."""
    try:
        slices = pglast.split(sql, only_slices=True)
    except pglast.parser.ParseError:
        return [sql]
    return [sql[s].strip() for s in slices if sql[s].strip()]


def returns_rows(statement: str) -> bool:
    try:
        node = pglast.parse_sql(statement)[0].stmt
    except pglast.parser.ParseError:
        return False
    name = type(node).__name__
    if name == "SelectStmt":
        return getattr(node, "intoClause", None) is None
    if name in _ROW_STATEMENTS:
        return True
    return getattr(node, "returningClause", None) is not None


@dataclass
class SqlSession:
    """The agent's sticky connection; reconnects (and says so) after it was lost."""

    endpoint: Endpoint
    role: str = "dba_agent"
    application_name: str = "dba_agent"
    timeout_s: float = 60.0
    max_rows: int = 200
    max_bytes: int = 20_000
    monitor: Endpoint | None = None  # harness endpoint for the sessions snapshot
    conn: asyncpg.Connection | None = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    _monitor_conn: asyncpg.Connection | None = None

    async def _backends(self) -> list[dict[str, Any]] | None:
        """The server's sessions now, seen by the harness (None if it cannot look)."""
        if self.monitor is None:
            return None
        for _ in range(2):
            try:
                if self._monitor_conn is None or self._monitor_conn.is_closed():
                    self._monitor_conn = await self.monitor.harness_connect(connect_timeout_s=5)
                rows = await self._monitor_conn.fetch(_BACKENDS_SQL, timeout=5)
                return [dict(r) for r in rows]
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                if self._monitor_conn is not None:
                    self._monitor_conn.terminate()
                self._monitor_conn = None
        return None

    async def _connection(self) -> tuple[asyncpg.Connection, str | None]:
        note = None
        if self.conn is not None and self.conn.is_closed():
            note = "note: the previous session was closed (terminated or restarted); reconnected"
            self.conn = None
        if self.conn is None:
            self.conn = await self.endpoint.connect(self.role, self.application_name)
        return self.conn, note

    async def open(self) -> None:
        """Connect now (before the faults start): the agent's psql session is already open
        when the task arrives, as a DBA's would be, so a fault that exhausts connection slots
        does not lock out a role that (on a managed service) has no reserved slot."""
        await self._connection()

    async def close(self) -> None:
        for conn in (self.conn, self._monitor_conn):
            if conn is not None and not conn.is_closed():
                conn.terminate()
        self.conn = self._monitor_conn = None

    async def execute(self, args: dict[str, Any]) -> ToolResult:
        call = sql_call(args, self.timeout_s)
        if isinstance(call, ToolResult):
            return call
        sql, timeout = call
        async with self.lock:
            return await self._execute(sql, timeout)

    async def _execute(self, sql: str, limit_s: float) -> ToolResult:
        try:
            conn, note = await self._connection()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            msg = f"cannot connect as {self.role}: {exc}"
            return ToolResult(ok=False, error=msg, observation=f"error: {msg}")
        detail = call_detail()  # filled as we go: a cancelled call keeps what it did
        detail.update(role=self.role, statements=[])
        out: list[str] = [note] if note else []
        try:
            settings = await conn.fetchrow(
                "SELECT current_setting('lock_timeout') AS lock_timeout, "
                "current_setting('statement_timeout') AS statement_timeout, pg_backend_pid() AS pid"
            )
            assert settings is not None
            detail["settings_before"] = {
                "lock_timeout": settings["lock_timeout"],
                "statement_timeout": settings["statement_timeout"],
            }
            detail["pid"] = settings["pid"]
            backends = await self._backends()
            if backends is not None:
                detail["backends_before"] = backends
        except (asyncpg.PostgresError, *CONNECTION_ERRORS) as exc:
            self.conn = None
            msg = f"session lost: {exc}"
            return ToolResult(ok=False, error=msg, observation=f"error: {msg}", detail=detail)
        statements = split_statements(sql)
        for i, stmt in enumerate(statements):
            entry: dict[str, Any] = {"sql": stmt}
            detail["statements"].append(entry)
            try:
                if returns_rows(stmt):
                    rows = await _fetch(conn, stmt, limit_s)
                    entry["tag"] = f"ROWS {len(rows)}"
                    out.append(format_rows(rows, self.max_rows, self.max_bytes))
                else:
                    tag = await conn.execute(stmt, timeout=limit_s)
                    entry["tag"] = tag
                    out.append(tag)
            except TimeoutError:
                entry["error"] = f"cancelled after {limit_s:.0f}s (per-call limit)"
                out.append(f"error: statement {i + 1} {entry['error']}")
                return failed_call(out, detail, entry["error"])
            except asyncpg.PostgresError as exc:
                entry["sqlstate"] = exc.sqlstate
                entry["error"] = str(exc)
                out.append(f"ERROR {exc.sqlstate}: {exc}")
                hint = getattr(exc, "hint", None)
                if hint:
                    out.append(f"HINT: {hint}")
                return failed_call(out, detail, str(exc), skipped=len(statements) - i - 1)
            except (asyncpg.InterfaceError, OSError) as exc:
                self.conn = None
                entry["error"] = f"connection lost: {exc}"
                out.append(f"error: {entry['error']}")
                return failed_call(out, detail, entry["error"])
        return ToolResult(ok=True, observation="\n".join(out), detail=detail)


async def _fetch(conn: asyncpg.Connection, stmt: str, limit_s: float) -> Sequence[Row]:
    """The rows of ``stmt``. A result asyncpg cannot type (``anyarray`` columns such as
    ``pg_stats.most_common_vals``, other pseudo-types) is fetched again as PostgreSQL's own
    text output, as psql shows it (asyncpg fails while preparing, before anything ran)."""
    try:
        return await conn.fetch(stmt, timeout=limit_s)
    except asyncpg.exceptions.InternalClientError:
        if not _copyable(stmt):
            raise
        return await _fetch_as_text(conn, stmt, limit_s)


def _copyable(stmt: str) -> bool:
    """Whether ``COPY (stmt) TO STDOUT`` can run it: a query without side effects of its own
    (SELECT, VALUES, TABLE; not SELECT INTO, not EXPLAIN or SHOW)."""
    try:
        node = pglast.parse_sql(stmt)[0].stmt
    except pglast.parser.ParseError:
        return False
    return type(node).__name__ == "SelectStmt" and getattr(node, "intoClause", None) is None


@dataclass(frozen=True)
class TextRow:
    """A row as text (duplicate column names kept, like an asyncpg record's)."""

    names: tuple[str, ...]
    cells: tuple[str | None, ...]

    def keys(self) -> tuple[str, ...]:
        return self.names

    def values(self) -> tuple[str | None, ...]:
        return self.cells


async def _fetch_as_text(conn: asyncpg.Connection, stmt: str, limit_s: float) -> list[TextRow]:
    """Rows as PostgreSQL's text output through ``COPY ... TO STDOUT`` (CSV: every value
    quoted, NULL as a marker no value can be)."""
    null = f"NULL-{secrets.token_hex(8)}"
    chunks: list[bytes] = []

    async def collect(data: bytes) -> None:
        chunks.append(data)

    query = stmt.rstrip().rstrip(";")
    await conn.copy_from_query(
        query, output=collect, format="csv", header=True, null=null, force_quote=True,
        timeout=limit_s,
    )  # fmt: skip
    reader = csv.reader(io.StringIO(b"".join(chunks).decode()))
    names = tuple(next(reader, []))
    return [TextRow(names, tuple(None if v == null else v for v in row)) for row in reader]


def sql_tool(session: SqlSession) -> Tool:
    spec = execute_sql_spec(
        "Run SQL on the live PostgreSQL database in your own persistent session (settings "
        "and open transactions carry over between calls). Use it for catalog, session and "
        "lock inspection (pg_stat_activity, pg_locks, pg_stat_user_tables, ...), EXPLAIN, "
        "and remediation. Several statements may be separated by semicolons. Results are "
        f"capped at {session.max_rows} rows; each call is limited to {session.timeout_s:.0f} s."
    )
    return Tool(spec=spec, handler=session.execute)
