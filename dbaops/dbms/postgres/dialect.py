"""PostgreSQL's offline face (no driver imported): see :mod:`dbaops.dbms.dialect`."""

from __future__ import annotations

from dbaops.dbms.dialect import EngineDialect, ServerSeries

DIALECT = EngineDialect(
    name="postgres",
    sql_dialect="postgres",
    metrics_overview=(
        "activity by state and wait event, locks, pg_stat_statements deltas, table stats, WAL, "
        "checkpoints, ..."
    ),
    server_panel=(
        ServerSeries("locks.waiting", "sum", "lock requests waiting"),
        ServerSeries("activity.oldest_xact_age_s", "max", "oldest transaction age (s)"),
    ),
)
