"""A TiDB session with the connection surface the runner's actors, checks and drivers use.

The runner's workloads, fault actors and checks were written against asyncpg connections:
``fetch``/``fetchrow``/``fetchval``/``execute`` with ``$n`` placeholders and ``timeout=``,
``prepare``, ``is_in_transaction``, ``close``/``terminate``. :class:`MysqlConnection` gives
an aiomysql connection that surface, so the same code runs a scenario on TiDB:

- ``$n`` placeholders are filled client-side with MySQL literals (as pymysql itself does);
- a statement that fails on the server raises :class:`MysqlServerError`, whose ``sqlstate``
  is the MySQL error number as text (``"1213"`` for a deadlock, ``"9007"`` for a write
  conflict): scenario retry policies and records name TiDB errors by their numbers;
- a connection that is gone (killed, server restarted) raises :class:`MysqlConnectionLost`,
  an ``OSError``, like asyncpg's lost connections;
- a call cut off by its ``timeout`` or by cancellation leaves the session mid-protocol: it is
  closed (the server drops the query with the connection) and the call raises.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import anyio
import pymysql

from dbaops.dbms.tidb import sqltext

#: Client-side error numbers (2000-2999, CR_*): the connection, not the statement, failed.
_CLIENT_ERRORS = range(2000, 3000)


class MysqlServerError(Exception):
    """The server refused or aborted a statement; ``sqlstate`` is its MySQL error number."""

    def __init__(self, errno: int, message: str) -> None:
        super().__init__(f"({errno}) {message}")
        self.errno = errno
        self.sqlstate = str(errno)
        self.message = message


class MysqlConnectionLost(ConnectionError):
    """The session is gone (killed, server stopped, network): reconnect if it should."""


def mysql_literal(value: Any) -> str:
    """A Python value as a MySQL literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float | Decimal):
        return repr(value) if not isinstance(value, Decimal) else str(value)
    if isinstance(value, datetime | date | time | timedelta):
        return "'" + str(value) + "'"
    return "'" + pymysql.converters.escape_string(str(value)) + "'"


def fill_placeholders(sql: str, args: Sequence[Any]) -> str:
    """``sql`` with each ``$n`` outside quotes and comments replaced by its argument's
    literal."""
    return sqltext.fill_placeholders(sql, args, mysql_literal)


class Row(tuple[Any, ...]):
    """A result row: by position like a tuple, or by column name like asyncpg's Record."""

    _names: dict[str, int]

    def __new__(cls, values: Sequence[Any], names: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        index = self._names.get(key)
        return default if index is None else tuple.__getitem__(self, index)

    def keys(self) -> Iterator[str]:
        return iter(self._names)

    def values(self) -> Iterator[Any]:
        return iter(self)

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((name, tuple.__getitem__(self, i)) for name, i in self._names.items())


def translate_error(exc: BaseException) -> BaseException:
    """pymysql's error as the runner's kind: lost connection or server error."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return MysqlConnectionLost(str(exc) or "the connection is closed")
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        errno, message = exc.args[0], str(exc.args[1]) if len(exc.args) > 1 else ""
        if errno in _CLIENT_ERRORS:
            return MysqlConnectionLost(f"({errno}) {message}")
        return MysqlServerError(errno, message)
    return exc


class PreparedQuery:
    """What :meth:`MysqlConnection.prepare` returns: the statement text, run with arguments
    filled in (TiDB plans it per call; its plan cache applies to server-side prepares)."""

    def __init__(self, conn: MysqlConnection, sql: str) -> None:
        self._conn = conn
        self._sql = sql

    async def fetch(self, *args: Any) -> list[Row]:
        return await self._conn.fetch(self._sql, *args)


class _Transaction:
    def __init__(self, conn: MysqlConnection) -> None:
        self._conn = conn

    async def __aenter__(self) -> None:
        await self._conn.execute("BEGIN")

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self._conn.execute("COMMIT")
        elif not self._conn.is_closed():
            with anyio.CancelScope(shield=True):
                await self._conn.execute("ROLLBACK", timeout=5)


class MysqlConnection:
    """An autocommit aiomysql connection with the surface of an asyncpg connection."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def get_server_pid(self) -> int:
        """The connection id (what ``KILL`` and the processlist name)."""
        return int(self.raw.server_thread_id[0])

    def is_closed(self) -> bool:
        """Closed here, or ended by the server (KILLed, timed out, the server stopped): the
        server closes the socket without a word, which the stream has seen as its end. So a
        pool notices a session the server ended before it hands it out, as asyncpg does."""
        if self.raw.closed:
            return True
        reader = getattr(self.raw, "_reader", None)  # aiomysql's stream of the socket
        if reader is None or not reader.at_eof():
            return False
        self.raw.close()  # the socket's end has been read: release it
        return True

    def is_in_transaction(self) -> bool:
        return not self.raw.closed and bool(self.raw.get_transaction_status())

    async def _run(self, sql: str, args: Sequence[Any], timeout: float | None) -> list[Row]:
        if self.raw.closed:
            raise MysqlConnectionLost("the connection is closed")
        text = fill_placeholders(sql, args)
        done = False
        try:
            with anyio.fail_after(timeout), warnings.catch_warnings(action="ignore"):
                async with self.raw.cursor() as cur:
                    await cur.execute(text)
                    rows = await cur.fetchall() if cur.description else ()
                    names = {d[0]: i for i, d in enumerate(cur.description or ())}
            done = True
        except TimeoutError:
            raise
        except pymysql.err.MySQLError as exc:
            done = not self.raw.closed
            raise translate_error(exc) from exc
        except (OSError, RuntimeError) as exc:  # the transport failed under aiomysql
            raise MysqlConnectionLost(str(exc) or type(exc).__name__) from exc
        finally:
            if not done:
                self.terminate()  # cut off mid-protocol: the session cannot be reused
        return [Row(r, names) for r in rows]

    async def fetch(self, sql: str, *args: Any, timeout: float | None = None) -> list[Row]:
        return await self._run(sql, args, timeout)

    async def fetchrow(self, sql: str, *args: Any, timeout: float | None = None) -> Row | None:
        rows = await self._run(sql, args, timeout)
        return rows[0] if rows else None

    async def fetchval(
        self, sql: str, *args: Any, column: int = 0, timeout: float | None = None
    ) -> Any:
        rows = await self._run(sql, args, timeout)
        return rows[0][column] if rows else None

    async def execute(self, sql: str, *args: Any, timeout: float | None = None) -> str:
        await self._run(sql, args, timeout)
        return "OK"

    async def prepare(self, sql: str) -> PreparedQuery:
        return PreparedQuery(self, sql)

    def transaction(self) -> _Transaction:
        """``async with conn.transaction():`` BEGIN, then COMMIT (ROLLBACK on an error)."""
        return _Transaction(self)

    def add_termination_listener(self, callback: Any) -> None:
        """Accepted for the surface's sake: a MySQL client learns that the server ended its
        session only on its next call, which then raises :class:`MysqlConnectionLost`."""

    async def reload_schema_state(self) -> None:
        """Nothing is cached client-side."""

    def terminate(self) -> None:
        """Drop the connection at once."""
        if not self.raw.closed:
            self.raw.close()

    async def close(self, timeout: float | None = None) -> None:
        """Quit politely, or drop a session that does not answer."""
        if self.raw.closed:
            return
        try:
            with anyio.fail_after(timeout or 5):
                await self.raw.ensure_closed()
        except (OSError, TimeoutError, pymysql.err.MySQLError, RuntimeError):
            self.terminate()
