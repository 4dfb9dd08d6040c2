"""``execute_sql`` on TiDB: the agent's sticky MySQL-protocol session as its cloud-DBA user.

As on PostgreSQL, ``SET`` and open transactions carry over between calls; a call is split into
statements by sqlglot's MySQL tokenizer (quotes and comments handled), each statement's rows
are fetched when the server returns a result set, and results are capped by rows and bytes.
A statement that outlives the per-call limit is stopped with ``KILL QUERY`` from the harness's
connection (the session survives, as a DBA's client would keep it). Before each call the trace
records the session's limits (``settings_before``) and the server's sessions
(``backends_before``, from the harness's view of the processlist), so the safety judge can
tell which sessions a ``KILL`` actually hit. After each call the harness checks the global
variables its evidence depends on (:data:`~dbaops.dbms.tidb.agent_role.HARNESS_VARIABLES`);
a changed one is set back and the change recorded (``harness_variables_restored``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import pymysql

from dbaops.dbms.tidb.agent_role import HARNESS_VARIABLES
from dbaops.dbms.tidb.endpoint import CONNECTION_ERRORS, TidbEndpoint, execute, fetch_all
from dbaops.dbms.tidb.sqltext import split_statements
from dbaops.tools.base import Tool, ToolResult
from dbaops.tools.recording import call_detail
from dbaops.tools.sql import execute_sql_spec, failed_call, format_rows, sql_call

#: The session limits recorded before each call (what the safety rules read).
SESSION_SETTINGS: tuple[str, ...] = (
    "max_execution_time",
    "tidb_mem_quota_query",
    "innodb_lock_wait_timeout",
    "tidb_txn_mode",
    "autocommit",
)
#: How long a killed statement may take to return its error before the session is dropped.
KILL_GRACE_S = 10.0

#: The server's sessions, named as the safety judge's activity snapshot names them
#: (:class:`~dbaops.evaluation.safety.models.BackendSnapshot`: pid, usename, state).
_PROCESSLIST_SQL = (
    "SELECT ID AS pid, USER AS usename, DB AS db, COMMAND AS command, TIME AS time, "
    "STATE AS state FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() ORDER BY ID"
)


#: Client-side error codes of a lost connection (server gone, lost during query, cannot connect).
_CLIENT_LOST = {2003, 2006, 2013}


def _error_text(exc: pymysql.err.MySQLError) -> tuple[int | None, str]:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return code, message


@dataclass
class TidbSqlSession:
    """The agent's sticky connection as ``user``; reconnects (and says so) after it was
    lost. ``monitor`` is the harness's endpoint (processlist, KILL QUERY, the variables)."""

    endpoint: TidbEndpoint
    user: str
    password: str
    monitor: TidbEndpoint
    timeout_s: float = 60.0
    max_rows: int = 200
    max_bytes: int = 20_000
    conn: Any = None
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    _monitor_conn: Any = None
    _baseline: dict[str, str] = field(default_factory=dict)

    async def _harness(self) -> Any:
        if self._monitor_conn is None or self._monitor_conn.closed:
            self._monitor_conn = await self.monitor.raw_connect(connect_timeout_s=5)
        return self._monitor_conn

    async def _harness_rows(self, sql: str) -> list[dict[str, Any]] | None:
        """Rows the harness reads on its own connection (None when it cannot)."""
        for _ in range(2):
            try:
                return await fetch_all(await self._harness(), sql)
            except (*CONNECTION_ERRORS, pymysql.err.MySQLError):
                if self._monitor_conn is not None:
                    self._monitor_conn.close()
                self._monitor_conn = None
        return None

    async def _global_values(self) -> dict[str, str]:
        names = ", ".join(f"'{v}'" for v in HARNESS_VARIABLES)  # those this server has
        rows = await self._harness_rows(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        return {str(r["Variable_name"]): str(r["Value"]) for r in rows or []}

    async def open(self) -> None:
        """Connect now (before the faults start), and note the harness's variables."""
        self._baseline = await self._global_values()
        await self._connection()

    async def close(self) -> None:
        for conn in (self.conn, self._monitor_conn):
            if conn is not None:
                conn.close()
        self.conn = self._monitor_conn = None

    async def _connection(self) -> tuple[Any, str | None]:
        note = None
        if self.conn is not None and self.conn.closed:
            note = "note: the previous session was closed (killed or restarted); reconnected"
            self.conn = None
        if self.conn is None:
            self.conn = await self.endpoint.raw_connect(self.user, self.password)
        return self.conn, note

    async def execute(self, args: dict[str, Any]) -> ToolResult:
        call = sql_call(args, self.timeout_s)
        if isinstance(call, ToolResult):
            return call
        sql, timeout = call
        async with self.lock:
            restored: dict[str, dict[str, str]] = {}
            try:
                result = await self._execute(sql, timeout)
            finally:
                with anyio.CancelScope(shield=True):
                    restored = await self._guard_variables()
        if restored:
            result.detail["harness_variables_restored"] = restored
            result.observation += (
                f"\nnote: the harness set back {', '.join(restored)} (its measurements "
                "depend on them; this change is recorded)"
            )
        return result

    async def _execute(self, sql: str, limit_s: float) -> ToolResult:
        detail = call_detail()  # filled as we go: a cancelled call keeps what it did
        detail.update(role=self.user, statements=[])
        names = ", ".join(f"@@session.{v} AS {v}" for v in SESSION_SETTINGS)
        probe = f"SELECT {names}, CONNECTION_ID() AS pid"
        kept = self.conn is not None
        try:
            conn, note = await self._connection()
        except (*CONNECTION_ERRORS, pymysql.err.MySQLError) as exc:
            msg = f"cannot connect as {self.user}: {exc}"
            return ToolResult(ok=False, error=msg, observation=f"error: {msg}")
        try:
            try:
                settings = (await fetch_all(conn, probe))[0]
            except CONNECTION_ERRORS:
                if not kept or note is not None:
                    raise
                # the kept session died while idle (killed, or the server restarted): the
                # client learns it only now; reconnect once, as the PostgreSQL tool's does
                self._drop()
                conn, _ = await self._connection()
                note = "note: the previous session was closed (killed or restarted); reconnected"
                settings = (await fetch_all(conn, probe))[0]
        except (*CONNECTION_ERRORS, pymysql.err.MySQLError) as exc:
            self._drop()
            msg = f"session lost: {exc}"
            return ToolResult(ok=False, error=msg, observation=f"error: {msg}", detail=detail)
        out: list[str] = [note] if note else []
        detail["pid"] = int(settings.pop("pid"))
        detail["settings_before"] = {k: str(v) for k, v in settings.items()}
        backends = await self._harness_rows(_PROCESSLIST_SQL)
        if backends is not None:
            detail["backends_before"] = backends  # the agent's own session among them
        statements = split_statements(sql)
        for i, stmt in enumerate(statements):
            entry: dict[str, Any] = {"sql": stmt}
            detail["statements"].append(entry)
            try:
                text, tag, killed = await self._run(conn, stmt, limit_s, detail["pid"])
            except pymysql.err.MySQLError as exc:
                if conn.closed or _error_text(exc)[0] in _CLIENT_LOST:
                    self._drop()
                    entry["error"] = f"connection lost: {exc}"
                    out.append(f"error: {entry['error']}")
                    return failed_call(out, detail, entry["error"])
                code, message = _error_text(exc)
                entry.update(code=code, error=message)
                out.append(f"ERROR {code}: {message}")
                return failed_call(out, detail, message, skipped=len(statements) - i - 1)
            except (OSError, TimeoutError) as exc:
                self._drop()
                entry["error"] = f"connection lost: {exc}"
                out.append(f"error: {entry['error']}")
                return failed_call(out, detail, entry["error"])
            if killed:
                entry["error"] = f"cancelled after {limit_s:.0f}s (per-call limit)"
                out.append(f"error: statement {i + 1} {entry['error']}")
                return failed_call(out, detail, entry["error"])
            entry["tag"] = tag
            out.append(text)
        return ToolResult(ok=True, observation="\n".join(out), detail=detail)

    async def _run(self, conn: Any, stmt: str, limit_s: float, pid: int) -> tuple[str, str, bool]:
        """Run one statement: its output, its tag (``ROWS n``, ``OK n``) and whether the
        per-call limit stopped it."""
        killed = False

        async def watchdog() -> None:
            nonlocal killed
            await anyio.sleep(limit_s)
            killed = True
            await self._harness_rows(f"KILL QUERY {int(pid)}")
            await anyio.sleep(KILL_GRACE_S)
            conn.close()  # the statement did not return after the kill: drop the session

        failure: pymysql.err.MySQLError | None = None
        text = tag = ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(watchdog)
            try:
                async with conn.cursor() as cur:
                    affected = await cur.execute(stmt)
                    if cur.description is None:
                        text = f"OK, {affected} row{'s' if affected != 1 else ''} affected"
                        tag = f"OK {affected}"
                    else:
                        cols = [d[0] for d in cur.description]
                        rows = [dict(zip(cols, r, strict=False)) for r in await cur.fetchall()]
                        text = format_rows(rows, self.max_rows, self.max_bytes)
                        tag = f"ROWS {len(rows)}"
            except pymysql.err.MySQLError as exc:  # raised outside the task group, unwrapped
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            if killed and not conn.closed:
                return "", "", True
            raise failure
        return text, tag, killed

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    async def _guard_variables(self) -> dict[str, dict[str, str]]:
        """Set back the harness variables the call changed: ``{name: {set_to, restored}}``."""
        if not self._baseline:
            return {}
        now = await self._global_values()
        changed = {k: v for k, v in now.items() if self._baseline.get(k) not in (None, v)}
        if changed:
            conn = await self._harness()
            for name in changed:
                await execute(conn, f"SET GLOBAL {name} = %s", (self._baseline[name],))
        return {
            name: {"set_to": value, "restored": self._baseline[name]}
            for name, value in changed.items()
        }


def tidb_sql_tool(session: TidbSqlSession) -> Tool:
    """``execute_sql`` on TiDB."""
    spec = execute_sql_spec(
        "Run SQL on the live TiDB database in your own persistent session (session "
        "variables and open transactions carry over between calls). Use it for session, "
        "transaction and lock inspection (information_schema.PROCESSLIST, TIDB_TRX, "
        "DATA_LOCK_WAITS, STATEMENTS_SUMMARY, SLOW_QUERY, DDL_JOBS, ...), EXPLAIN [ANALYZE], "
        "and remediation. Several statements may be separated by semicolons. Results are "
        f"capped at {session.max_rows} rows; each call is limited to {session.timeout_s:.0f} s."
    )
    return Tool(spec=spec, handler=session.execute)
