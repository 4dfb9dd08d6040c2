"""TiDB's standard observation surface: what a DBA's first look at a tidb-server reads.

The harness runs these (read-only, as its own hidden session) once when the agent starts, so a
scenario's environmental complexity C_s is counted over what the environment shows, not over
how a reference run happened to word its queries (:mod:`dbaops.execution.survey`). Rows are
capped so one busy table cannot swamp the others.
"""

from __future__ import annotations

_SYSTEM_SCHEMAS = "('mysql', 'INFORMATION_SCHEMA', 'PERFORMANCE_SCHEMA', 'METRICS_SCHEMA', 'sys')"

#: Probe name -> query. Each returns at most a few hundred rows.
SURVEY_PROBES: dict[str, str] = {
    "sessions": (
        "SELECT ID, USER, DB, COMMAND, TIME, STATE, LEFT(INFO, 120) AS INFO "
        "FROM information_schema.processlist WHERE ID <> CONNECTION_ID() ORDER BY ID LIMIT 300"
    ),
    "transactions": (
        "SELECT ID, SESSION_ID, STATE, START_TIME, USER, DB, "
        "LEFT(CURRENT_SQL_DIGEST_TEXT, 120) AS CURRENT_SQL "
        "FROM information_schema.tidb_trx ORDER BY ID LIMIT 300"
    ),
    "lock_waits": (
        "SELECT `KEY`, TRX_ID, CURRENT_HOLDING_TRX_ID, LEFT(SQL_DIGEST_TEXT, 120) AS SQL_TEXT "
        "FROM information_schema.data_lock_waits LIMIT 300"
    ),
    "statements": (
        "SELECT EXEC_COUNT, SUM_LATENCY, AVG_LATENCY, SUM_ERRORS, "
        "LEFT(DIGEST_TEXT, 160) AS DIGEST_TEXT FROM information_schema.statements_summary "
        "ORDER BY SUM_LATENCY DESC LIMIT 25"
    ),
    "tables": (
        "SELECT TABLE_NAME, TABLE_SCHEMA, TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH "
        f"FROM information_schema.tables WHERE TABLE_SCHEMA NOT IN {_SYSTEM_SCHEMAS} "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME LIMIT 300"
    ),
    "indexes": (
        "SELECT TABLE_NAME, KEY_NAME, COLUMN_NAME, SEQ_IN_INDEX, IS_VISIBLE "
        f"FROM information_schema.tidb_indexes WHERE TABLE_SCHEMA NOT IN {_SYSTEM_SCHEMAS} "
        "ORDER BY TABLE_NAME, KEY_NAME, SEQ_IN_INDEX LIMIT 300"
    ),
    # GLOBAL values (the survey's own session has the harness's limits; variables_info's
    # CURRENT_VALUE would show those), tidb_config (one huge JSON document) left out
    "settings": (
        "SELECT g.VARIABLE_NAME, g.VARIABLE_VALUE, v.DEFAULT_VALUE "
        "FROM mysql.global_variables g JOIN information_schema.variables_info v "
        "ON v.VARIABLE_NAME = g.VARIABLE_NAME "
        "WHERE g.VARIABLE_VALUE <> v.DEFAULT_VALUE AND g.VARIABLE_NAME <> 'tidb_config' "
        "ORDER BY g.VARIABLE_NAME LIMIT 300"
    ),
    "bindings": (
        "SELECT LEFT(original_sql, 120) AS original_sql, LEFT(bind_sql, 160) AS bind_sql, status "
        "FROM mysql.bind_info WHERE source <> 'builtin' LIMIT 300"
    ),
    "ddl_jobs": (
        "SELECT JOB_ID, JOB_TYPE, TABLE_NAME, STATE, CREATE_TIME FROM information_schema.ddl_jobs "
        "ORDER BY JOB_ID DESC LIMIT 25"
    ),
    "resource_groups": (
        "SELECT NAME, RU_PER_SEC, PRIORITY, BURSTABLE FROM information_schema.resource_groups "
        "LIMIT 300"
    ),
    "users": "SELECT User, Host, Account_locked FROM mysql.user ORDER BY User LIMIT 300",
}
