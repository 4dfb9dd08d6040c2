"""One client session running transaction templates: the driver's hot path.

``prepared`` (the default) prepares each statement once per connection, ``BEGIN`` and
``COMMIT`` included, and executes it with parameters: the round trips of ``pgbench -M
prepared`` (BEGIN, the statements, COMMIT), without the per-call statement-cache lookup and
transaction object of the driver's connection methods (each engine's fastest call:
``EngineSessions.prepared_executor``). ``simple`` writes the arguments into the
SQL text and sends each statement as a simple query, so the server parses and plans it on every
run (``pgbench -M simple``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio

from dbaops.clock import ScenarioClock
from dbaops.dbms.sessions import (
    CONNECTION_ERRORS,
    ISOLATION_LEVELS,
    SERVER_ERRORS,
    Session,
    sessions_of,
)
from dbaops.workloads.spec import PreviousArg, TransactionTemplate

Protocol = Literal["prepared", "simple"]


#: A quoted literal, a quoted identifier, a comment, or a ``$n`` placeholder.
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|\$(\d+)", re.S)


def sql_literal(value: Any) -> str:
    """A Python value as an SQL literal (standard-conforming strings)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if "\x00" in text:
        raise ValueError("an SQL literal cannot hold a NUL character")
    return "'" + text.replace("'", "''") + "'"


def inline_args(sql: str, args: Sequence[Any]) -> str:
    """``sql`` with each ``$n`` outside quotes and comments replaced by its argument's literal."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group(0)
        return sql_literal(args[int(m.group(1)) - 1])

    return _TOKENS.sub(sub, sql)


#: Runs one prepared statement with its arguments and returns its rows.
Executor = Callable[[Sequence[Any]], Awaitable[list[Any]]]


def _fetching(conn: Session, stmt: Any) -> Executor:
    """A prepared statement run through its public ``fetch`` (an engine without a faster
    call of its own)."""
    del conn
    return lambda args: stmt.fetch(*args)  # type: ignore[no-any-return]


class StatementCaches:
    """What the sessions of one client share about their statement caches, as the
    connections of a driver's pool do: when one learns that a statement's result type changed
    (ALTER TABLE, ALTER TYPE), every session prepares its statements again, so a schema change
    costs the client one failed statement, not one per connection."""

    def __init__(self) -> None:
        self.generation = 0


class TemplateSession:
    """A session and the statements it has prepared; ``queries`` counts the
    statements it has run (for a client that recycles connections)."""

    def __init__(
        self,
        conn: Session,
        protocol: Protocol = "prepared",
        caches: StatementCaches | None = None,
    ) -> None:
        self.conn = conn
        engine = sessions_of(conn)
        # an engine whose client fills in the arguments (TiDB's, in MySQL literals) runs
        # every statement so, whatever the protocol
        self.protocol: Protocol = protocol if engine.server_side_prepare else "prepared"
        dialect = engine.dialect
        self._executor = engine.prepared_executor or _fetching
        self._stale = engine.stale_statement_errors
        self._begin = {iso: dialect.begin(iso) for iso in ISOLATION_LEVELS}
        self.queries = 0
        self._prepared: dict[str, tuple[Any, Executor]] = {}
        self._caches = caches or StatementCaches()
        self._generation = self._caches.generation

    def is_closed(self) -> bool:
        return self.conn.is_closed()

    async def _statement(self, sql: str) -> Executor:
        if self._generation != self._caches.generation:  # another session saw a change
            self._prepared.clear()
            self._generation = self._caches.generation
        entry = self._prepared.get(sql)
        if entry is None:
            stmt = await self.conn.prepare(sql)
            # the statement object is kept: a driver may close a statement it collects
            entry = self._prepared[sql] = (stmt, self._executor(self.conn, stmt))
        return entry[1]

    async def _run(self, sql: str, args: Sequence[Any]) -> Any:
        """One statement; returns the first column of its first row (None without rows)."""
        self.queries += 1
        if self.protocol == "simple":
            await self.conn.execute(inline_args(sql, args) if args else sql)
            return None
        execute = await self._statement(sql)
        try:
            rows = await execute(args)
        except self._stale:
            # the result type changed (ALTER TABLE, ALTER TYPE): prepare again next time,
            # and retry at once outside a transaction, as the driver's own cache does
            self._prepared.clear()
            self._caches.generation += 1
            self._generation = self._caches.generation
            await self.conn.reload_schema_state()
            if self.conn.is_in_transaction():
                raise
            rows = await (await self._statement(sql))(args)
        return rows[0][0] if rows else None

    async def run(
        self,
        template: TransactionTemplate,
        drawn: list[list[Any]],
        give_up: float,
        clock: ScenarioClock,
    ) -> None:
        """Execute a template's statements (in a transaction unless it is one statement at
        read committed) by monotonic time ``give_up``, else raise ``TimeoutError`` (the driver
        sends the server a cancel request for the statement then running). ``None`` slots
        (previous-result arguments) are filled from earlier statements' results. On any
        failure an open transaction is rolled back, or the connection closed if that fails."""
        remaining = give_up - clock.mono()
        if remaining <= 0:
            raise TimeoutError
        # one deadline for the attempt, not a timer per statement (asyncio's: the drivers run on
        # asyncio only, and this is the hot path; anyio's scope costs about twice as much)
        async with asyncio.timeout(remaining):
            statements = template.statements
            if len(statements) == 1 and template.isolation == "read_committed":
                await self._run(statements[0].sql, drawn[0])
                return
            previous: list[Any] = []
            try:
                for begin in self._begin[template.isolation]:
                    await self._run(begin, ())
                for st, args in zip(statements, drawn, strict=True):
                    if None in args:
                        args = [
                            previous[a.previous] if isinstance(a, PreviousArg) else v
                            for a, v in zip(st.args, args, strict=True)
                        ]
                    previous.append(await self._run(st.sql, args))
                await self._run("COMMIT", ())
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.rollback()
                raise

    async def rollback(self) -> None:
        """End a transaction a failure left open; a session that cannot is terminated."""
        conn = self.conn
        if conn.is_closed() or not conn.is_in_transaction():
            return
        try:
            await conn.execute("ROLLBACK", timeout=2)
        except SERVER_ERRORS + CONNECTION_ERRORS + (TimeoutError,):
            conn.terminate()

    def terminate(self) -> None:
        self.conn.terminate()

    async def close(self) -> None:
        """Close politely, or terminate a session that does not answer."""
        with anyio.CancelScope(shield=True):
            try:
                await self.conn.close(timeout=2)
            except CONNECTION_ERRORS + (TimeoutError,):
                self.conn.terminate()
