"""TiDB's offline face (no driver imported): see :mod:`dbaops.dbms.dialect`."""

from __future__ import annotations

from typing import Any

from dbaops.dbms.capabilities import EngineCapabilities
from dbaops.dbms.dialect import EngineDialect, ServerSeries
from dbaops.dbms.tidb.metrics import REGISTRY
from dbaops.dbms.tidb.serverlog import log_line_stamp
from dbaops.dbms.tidb.sqltext import quote_ident, split_statements, sql_problem
from dbaops.dbms.tidb.survey import SURVEY_PROBES


def _scenario_problems(sc: Any, lib: Any, parts: Any) -> list[str]:
    """TiDB's scenario checks, loaded on first use (they read the scenario format)."""
    from dbaops.dbms.tidb.scenario_checks import scenario_problems

    return scenario_problems(sc, lib, parts)


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
    log_line_stamp=log_line_stamp,
    log_prefix="'[YYYY/MM/DD HH:MM:SS.mmm +ZZ:ZZ] [LEVEL]' (TiDB's log format)",
    split_statements=split_statements,
    quote_ident=quote_ident,
    sql_problem=sql_problem,
    # a TiDB scenario's SQL is keyed as written
    canonical_sql=None,
    # a fatal log entry (a panic TiDB recovers in a session is logged as an error, and is not
    # the server's crash)
    crash_markers=("] [FATAL] ",),
    metrics=REGISTRY,
    survey_probes=SURVEY_PROBES,
    scenario_problems=_scenario_problems,
    instance_actions=("status", "set_variable", "restart", "stop", "start"),
    # VERSION() says 8.0.11-TiDB-v9.0.0-..., a MySQL version first
    release=lambda version: (
        version.split("-TiDB-", 1)[1].lstrip("v") if "-TiDB-" in version else version
    ),
    capabilities=EngineCapabilities(
        # the rest act on PostgreSQL's configuration files or on a container's machine
        fault_kinds=frozenset({"sql", "hold_transaction", "load", "idle_connections", "instance"}),
        # a plan check reads PostgreSQL's EXPLAIN (FORMAT JSON)
        check_kinds=frozenset({"sql", "workload", "server_log", "metric", "report", "ledger"}),
        topologies=frozenset({"standalone", "cluster"}),
        history=True,
    ),
)
