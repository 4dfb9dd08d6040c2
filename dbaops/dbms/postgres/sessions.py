"""PostgreSQL's sessions as the runner handles them (:mod:`dbaops.dbms.sessions`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from asyncpg.prepared_stmt import PreparedStatement

from dbaops.dbms.postgres.endpoint import (
    CONNECTION_ERRORS,
    HARNESS_APPLICATION,
    Endpoint,
    quote_ident,
)
from dbaops.dbms.postgres.plans import explain
from dbaops.dbms.postgres.sqltext import quote_literal
from dbaops.dbms.session_kinds import ISOLATION, EngineSessions, SessionDialect


def statement_executor(
    conn: asyncpg.Connection, stmt: PreparedStatement
) -> Callable[[Sequence[Any]], Awaitable[list[Any]]]:
    """How the hot path runs a prepared statement: the protocol call that asyncpg's
    ``PreparedStatement.fetch`` makes once it has re-checked the connection and the statement
    (five Python frames per call, about a tenth of a tpcb unit's client CPU). Where this
    asyncpg has no such call, the public ``fetch``. Errors are the same either way: the
    protocol raises them."""
    bind = getattr(getattr(conn, "_protocol", None), "bind_execute", None)
    state = getattr(stmt, "_state", None)
    if bind is None or state is None:
        return lambda args: stmt.fetch(*args)  # type: ignore[no-any-return]
    return lambda args: bind(state, args, "", 0, False, None)  # type: ignore[no-any-return]


SESSIONS = EngineSessions(
    endpoint_type=Endpoint,
    session_types=(asyncpg.Connection,),
    dialect=SessionDialect(
        session_ids_sql="SELECT pid FROM pg_catalog.pg_stat_activity",
        begin=lambda iso: [f"BEGIN ISOLATION LEVEL {ISOLATION[iso]}"],
        sleep=lambda s: f"SELECT pg_sleep({s:.3f})",
        # TABLESAMPLE refuses a view swapped in under the name before the view's code could
        # run; SYSTEM (100) reads every page
        count_rows=lambda schema, name: (
            f"(SELECT pg_catalog.count(*) FROM ONLY {quote_ident(schema)}.{quote_ident(name)} "
            "TABLESAMPLE pg_catalog.system (100))"
        ),
        set_setting=lambda name, value: f"SET {name} TO {quote_literal(value)}",
        maintenance_database="postgres",
        harness_application=HARNESS_APPLICATION,
        set_server_setting=lambda name, value: f"ALTER SYSTEM SET {name} = {quote_literal(value)}",
        reload_config="SELECT pg_catalog.pg_reload_conf()",
        config_file="postgresql.conf",
        create_tablespace=lambda name, owner, location: (
            f"CREATE TABLESPACE {quote_ident(name)}"
            + (f" OWNER {quote_ident(owner)}" if owner else "")
            + f" LOCATION {quote_literal(location)}"
        ),
        server_processes_sql=(
            "SELECT pid, backend_start::text AS started FROM pg_catalog.pg_stat_activity "
            "WHERE backend_type = $1 AND pid <> pg_catalog.pg_backend_pid() "
            "AND coalesce(application_name, '') <> $4 "
            "AND ($2::text IS NULL OR application_name = $2) "
            "AND ($3::text IS NULL OR usename = $3) ORDER BY backend_start, pid"
        ),
    ),
    server_errors=(asyncpg.PostgresError,),
    connection_errors=CONNECTION_ERRORS,
    lost_server_errors=(asyncpg.PostgresConnectionError,),
    prepared_executor=statement_executor,
    explain=explain,
    stale_statement_errors=(asyncpg.InvalidCachedStatementError, asyncpg.OutdatedSchemaCacheError),
)
