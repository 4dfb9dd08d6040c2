"""What the runner's sessions connect through, whatever the engine, and the errors they raise.

A :data:`RunEndpoint` (PostgreSQL's :class:`~dbaops.dbms.postgres.endpoint.Endpoint` or TiDB's
:class:`~dbaops.dbms.tidb.endpoint.TidbEndpoint`) opens :data:`Session` objects with one
surface (asyncpg's): the workloads, fault actors, checks and preparation use only that. A
statement the server refused raises one of ``SERVER_ERRORS``, each with a ``sqlstate``
(PostgreSQL's SQLSTATE, or TiDB's error number as text); a session that is gone raises one of
``CONNECTION_ERRORS`` (reconnect if it should)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import asyncpg

from dbaops.dbms.postgres.endpoint import CONNECTION_ERRORS as _PG_CONNECTION_ERRORS
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.endpoint import quote_ident as _pg_ident
from dbaops.dbms.tidb.connection import MysqlConnection, MysqlConnectionLost, MysqlServerError
from dbaops.dbms.tidb.endpoint import TidbEndpoint
from dbaops.dbms.tidb.endpoint import quote_ident as _mysql_ident

RunEndpoint: TypeAlias = Endpoint | TidbEndpoint
Session: TypeAlias = asyncpg.Connection | MysqlConnection

SERVER_ERRORS = (asyncpg.PostgresError, MysqlServerError)

CONNECTION_ERRORS = (
    *_PG_CONNECTION_ERRORS,
    MysqlConnectionLost,
)

#: A server error that means the connection is unusable, as well as the statement failed.
LOST_ERRORS = (asyncpg.PostgresConnectionError, *CONNECTION_ERRORS)


@dataclass(frozen=True)
class SessionDialect:
    """The few statements the runner's actors phrase per engine."""

    #: The ids of every session the server has.
    session_ids_sql: str
    #: ``BEGIN`` at an isolation level, as statements to run in order.
    begin: Callable[[str], list[str]]
    #: A statement that sleeps this many wall seconds on the server.
    sleep: Callable[[float], str]
    #: An expression counting the rows stored in table (schema, name) itself, not in the
    #: tables that inherit from it, with nothing resolved through the search path and no
    #: code run (PostgreSQL: TABLESAMPLE refuses a view swapped in under the name before
    #: the view's code could run; SYSTEM (100) reads every page).
    count_rows: Callable[[str, str], str]
    #: A statement setting a session setting (the name already checked) to a value.
    set_setting: Callable[[str, str], str]


def _pg_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _mysql_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


_ISOLATION = {
    "read_committed": "READ COMMITTED",
    "repeatable_read": "REPEATABLE READ",
    "serializable": "SERIALIZABLE",
}
ISOLATION_LEVELS = tuple(_ISOLATION)

POSTGRES_SESSIONS = SessionDialect(
    session_ids_sql="SELECT pid FROM pg_stat_activity",
    begin=lambda iso: [f"BEGIN ISOLATION LEVEL {_ISOLATION[iso]}"],
    sleep=lambda s: f"SELECT pg_sleep({s:.3f})",
    count_rows=lambda schema, name: (
        f"(SELECT pg_catalog.count(*) FROM ONLY {_pg_ident(schema)}.{_pg_ident(name)} "
        "TABLESAMPLE pg_catalog.system (100))"
    ),
    set_setting=lambda name, value: f"SET {name} TO {_pg_literal(value)}",
)

#: TiDB: pessimistic transactions at READ COMMITTED or REPEATABLE READ (its default);
#: SERIALIZABLE does not exist there, so it is refused by the server.
MYSQL_SESSIONS = SessionDialect(
    session_ids_sql="SELECT ID FROM information_schema.cluster_processlist",
    begin=lambda iso: [f"SET TRANSACTION ISOLATION LEVEL {_ISOLATION[iso]}", "BEGIN"],
    sleep=lambda s: f"SELECT SLEEP({s:.3f})",
    count_rows=lambda schema, name: (
        f"(SELECT COUNT(*) FROM {_mysql_ident(schema)}.{_mysql_ident(name)})"
    ),
    set_setting=lambda name, value: f"SET SESSION {name} = {_mysql_literal(value)}",
)


def session_dialect(conn: Session) -> SessionDialect:
    """The statements of ``conn``'s engine."""
    return MYSQL_SESSIONS if isinstance(conn, MysqlConnection) else POSTGRES_SESSIONS
