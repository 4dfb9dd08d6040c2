"""TiDB's sessions as the runner handles them (:mod:`dbaops.dbms.sessions`)."""

from __future__ import annotations

from dbaops.dbms.session_kinds import ISOLATION, EngineSessions, SessionDialect
from dbaops.dbms.tidb.connection import MysqlConnection, MysqlConnectionLost, MysqlServerError
from dbaops.dbms.tidb.endpoint import TidbEndpoint, quote_ident, quote_literal

#: Pessimistic transactions at READ COMMITTED or REPEATABLE READ (TiDB's default);
#: SERIALIZABLE does not exist there, so it is refused by the server.
SESSIONS = EngineSessions(
    endpoint_type=TidbEndpoint,
    session_types=(MysqlConnection,),
    dialect=SessionDialect(
        session_ids_sql="SELECT ID FROM information_schema.cluster_processlist",
        begin=lambda iso: [f"SET TRANSACTION ISOLATION LEVEL {ISOLATION[iso]}", "BEGIN"],
        sleep=lambda s: f"SELECT SLEEP({s:.3f})",
        count_rows=lambda schema, name: (
            f"(SELECT COUNT(*) FROM {quote_ident(schema)}.{quote_ident(name)})"
        ),
        set_setting=lambda name, value: f"SET SESSION {name} = {quote_literal(value)}",
    ),
    server_errors=(MysqlServerError,),
    connection_errors=(MysqlConnectionLost,),
    # arguments are filled in client-side, in MySQL literals, whatever the protocol
    server_side_prepare=False,
)
