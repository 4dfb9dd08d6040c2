"""TiDB's offline face (no driver imported): see :mod:`dbaops.dbms.dialect`."""

from __future__ import annotations

from dbaops.dbms.dialect import EngineDialect, ServerSeries

DIALECT = EngineDialect(
    name="tidb",
    sql_dialect="mysql",
    metrics_overview=(
        "connections, active sessions, open transactions and the oldest one's age, lock waits, "
        "pending DDL jobs, queries, statements and errors per second by type, CPU and memory "
        "of tidb-server, ..."
    ),
    server_panel=(
        ServerSeries("tidb.lock_waits", "sum", "lock requests waiting"),
        ServerSeries("tidb.oldest_transaction_s", "max", "oldest transaction age (s)"),
    ),
)
