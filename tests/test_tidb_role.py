"""The agent's TiDB user: what a cloud DBA can do on the embedded server (Security Enhanced
Mode on), and the channels to files, programs and the harness's evidence that it cannot use."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pymysql
import pytest

from dbaops.dbms.tidb.agent_role import forbidden_privileges, grant_tidb_dba, user_privileges
from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.dbms.tidb.endpoint import fetch_all, fetch_value
from dbaops.dbms.tidb.server import TidbServer
from dbaops.testing.tidb import AGENT_PASSWORD, AGENT_USER, tidb_with_agent

pytestmark = pytest.mark.anyio

#: What the cloud-DBA user does in TiDB scenarios (each must succeed).
ALLOWED = [
    "SET GLOBAL tidb_gc_life_time = '30m'",
    "SET GLOBAL tidb_mem_quota_query = 1073741824",
    "SET SESSION tidb_mem_quota_query = 1073741824",
    "SELECT count(*) FROM information_schema.processlist",
    "SELECT count(*) FROM information_schema.tidb_trx",
    "SELECT count(*) FROM information_schema.data_lock_waits",
    "SELECT count(*) FROM information_schema.statements_summary",
    "SELECT count(*) FROM information_schema.slow_query",
    "CREATE RESOURCE GROUP rg_test RU_PER_SEC = 100",
    "DROP RESOURCE GROUP rg_test",
    "CREATE PLACEMENT POLICY p_test PRIMARY_REGION='r1' REGIONS='r1'",
    "DROP PLACEMENT POLICY p_test",
    "ALTER TABLE t CACHE",
    "ALTER TABLE t NOCACHE",
    "ANALYZE TABLE t",
    "CREATE INDEX t_v2 ON t (v)",
]

#: Channels the agent must not have: (statement, what the refusal says).
REFUSED = [
    ("SET GLOBAL tidb_slow_log_threshold = 1", "RESTRICTED_VARIABLES_ADMIN"),
    ("SET tidb_slow_query_file = '/etc/passwd'", "RESTRICTED_VARIABLES_ADMIN"),
    ("SELECT @@global.tidb_general_log", "RESTRICTED_VARIABLES_ADMIN"),
    ("SELECT * FROM information_schema.cluster_log WHERE time > '2020-01-01'", "denied"),
    ("SELECT * FROM information_schema.cluster_config", "denied"),
    ("SELECT * FROM t INTO OUTFILE '/tmp/dbaops-agent-out'", "security enhanced mode"),
    ("LOAD DATA INFILE '/etc/passwd' INTO TABLE t", "tidb-server's disk"),
    ("SELECT count(*) FROM mysql.user", "denied"),
    ("SHOW CONFIG", "CONFIG"),
    ("CREATE USER intruder", "CREATE User"),
    ("GRANT SUPER ON *.* TO dba_agent", "super"),
    # TiDB asks SUPER of bindings (session ones too) and ADMIN statements
    (
        "CREATE GLOBAL BINDING FOR SELECT * FROM t WHERE v = 1 "
        "USING SELECT * FROM t IGNORE INDEX (v) WHERE v = 1",
        "super",
    ),  # fmt: skip
    ("ADMIN SHOW DDL JOBS", "super"),
    ("SHUTDOWN", "SHUTDOWN"),
    ("BACKUP DATABASE shop TO 'local:///tmp/dbaops-agent-bk'", "BACKUP_ADMIN"),
    ("SET GLOBAL tidb_enable_enhanced_security = OFF", ""),
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def role_server(tidb_binary: TidbBinary) -> AsyncIterator[TidbServer]:
    async with tidb_with_agent("pytest-tidb-role", tidb_binary) as server:
        yield server


@pytest.fixture
async def agent(role_server: TidbServer) -> AsyncIterator[Any]:
    conn = await role_server.endpoint("shop").raw_connect(AGENT_USER, AGENT_PASSWORD)
    try:
        yield conn
    finally:
        conn.close()


async def test_the_user_holds_the_dba_privileges_and_no_forbidden_one(
    role_server: TidbServer,
) -> None:
    conn = await role_server.connect()
    try:
        held = await user_privileges(conn, "dba_agent")
        assert await forbidden_privileges(conn, "dba_agent") == []
        assert await fetch_value(conn, "SELECT @@tidb_enable_enhanced_security") in (1, "ON")
    finally:
        conn.close()
    assert {"PROCESS", "SYSTEM_VARIABLES_ADMIN", "CONNECTION_ADMIN", "RESOURCE_GROUP_ADMIN",
            "PLACEMENT_ADMIN"} <= held  # fmt: skip
    assert "SUPER" not in held and "FILE" not in held


@pytest.mark.parametrize("statement", ALLOWED)
async def test_a_dba_can(agent: Any, statement: str) -> None:
    await fetch_all(agent, statement)


@pytest.mark.parametrize(("statement", "refusal"), REFUSED)
async def test_the_agent_cannot(agent: Any, statement: str, refusal: str) -> None:
    with pytest.raises(pymysql.err.MySQLError) as err:
        await fetch_all(agent, statement)
    assert refusal.lower() in str(err.value).lower()


async def test_no_file_is_read_through_the_database(agent: Any) -> None:
    assert await fetch_value(agent, "SELECT LOAD_FILE('/etc/passwd')") is None


async def test_a_scenario_may_add_only_named_privileges(role_server: TidbServer) -> None:
    conn = await role_server.connect()
    try:
        with pytest.raises(ValueError, match="cannot be granted"):
            await grant_tidb_dba(conn, "x", "y", databases=[], extra_privileges=["SUPER"])
        await grant_tidb_dba(conn, "dba_backup", "pw", databases=["shop"],
                             extra_privileges=["backup_admin"])  # fmt: skip
        assert "BACKUP_ADMIN" in await user_privileges(conn, "dba_backup")
        assert await forbidden_privileges(conn, "dba_backup") == []
    finally:
        conn.close()


async def test_the_harness_slow_statements_are_gone_from_what_the_agent_reads(
    role_server: TidbServer, agent: Any
) -> None:
    """``information_schema.slow_query`` reads the slow log file, which ``read_log``'s filter
    does not reach: at the agent's start the harness's records leave the file."""
    from dbaops.dbms.tidb.endpoint import execute
    from dbaops.dbms.tidb.serverlog import forget_harness_records

    harness = await role_server.connect()
    try:
        await execute(harness, "SELECT SLEEP(0.6) /* the harness's construction */")
    finally:
        harness.close()
    await fetch_all(agent, "SELECT SLEEP(0.6) /* the application's slow query */")
    query = "SELECT count(*) FROM information_schema.slow_query WHERE query LIKE '%/* the %'"
    harness_query = query.replace("the %", "the harness%")
    assert await fetch_value(agent, harness_query) == 1  # the leak, before
    forget_harness_records(role_server.slow_log_path)
    assert await fetch_value(agent, harness_query) == 0
    assert await fetch_value(agent, query.replace("the %", "the application%")) == 1
