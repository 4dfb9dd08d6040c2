"""PostgreSQL's sessions as the runner handles them (:mod:`dbaops.dbms.sessions`)."""

from __future__ import annotations

import asyncpg

from dbaops.dbms.postgres.endpoint import CONNECTION_ERRORS, Endpoint, quote_ident
from dbaops.dbms.session_kinds import ISOLATION, EngineSessions, SessionDialect


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


SESSIONS = EngineSessions(
    endpoint_type=Endpoint,
    session_types=(asyncpg.Connection,),
    dialect=SessionDialect(
        session_ids_sql="SELECT pid FROM pg_stat_activity",
        begin=lambda iso: [f"BEGIN ISOLATION LEVEL {ISOLATION[iso]}"],
        sleep=lambda s: f"SELECT pg_sleep({s:.3f})",
        # TABLESAMPLE refuses a view swapped in under the name before the view's code could
        # run; SYSTEM (100) reads every page
        count_rows=lambda schema, name: (
            f"(SELECT pg_catalog.count(*) FROM ONLY {quote_ident(schema)}.{quote_ident(name)} "
            "TABLESAMPLE pg_catalog.system (100))"
        ),
        set_setting=lambda name, value: f"SET {name} TO {_literal(value)}",
    ),
    server_errors=(asyncpg.PostgresError,),
    connection_errors=CONNECTION_ERRORS,
    lost_server_errors=(asyncpg.PostgresConnectionError,),
)
