"""``execute_sql`` on TiDB, against the real embedded server: a sticky session as the agent's
user, statements split outside quotes and comments, the per-call limit (KILL QUERY, the
session kept), what the trace records for the safety judge, and the harness's variables."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.dbms.tidb.endpoint import execute, fetch_value
from dbaops.dbms.tidb.server import TidbServer
from dbaops.dbms.tidb.sql_session import TidbSqlSession, tidb_sql_tool
from dbaops.dbms.tidb.sqltext import split_statements
from dbaops.testing.tidb import AGENT_PASSWORD, AGENT_USER, tidb_with_agent

pytestmark = pytest.mark.anyio


def test_split_outside_quotes_and_comments() -> None:
    sql = "SELECT ';' AS a; /* one; two */ SET GLOBAL tidb_gc_life_time = '30m';\nKILL QUERY 5;"
    assert split_statements(sql) == [
        "SELECT ';' AS a",
        "/* one; two */ SET GLOBAL tidb_gc_life_time = '30m'",
        "KILL QUERY 5",
    ]
    assert split_statements("  ") == []
    assert split_statements("SELECT 'unterminated") == ["SELECT 'unterminated"]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server(tidb_binary: TidbBinary) -> AsyncIterator[TidbServer]:
    async with tidb_with_agent("pytest-tidb-sql", tidb_binary) as started:
        yield started


@pytest.fixture
async def session(server: TidbServer) -> AsyncIterator[TidbSqlSession]:
    sql = TidbSqlSession(
        server.endpoint("shop"), AGENT_USER, AGENT_PASSWORD, monitor=server.endpoint(),
        timeout_s=30,
    )  # fmt: skip
    await sql.open()
    try:
        yield sql
    finally:
        await sql.close()


async def test_session_is_sticky_and_results_are_tables(session: TidbSqlSession) -> None:
    tool = tidb_sql_tool(session)
    assert tool.spec.name == "execute_sql" and "TiDB" in tool.spec.description
    first = await tool.handler({"sql": "SET @x = 41; BEGIN; INSERT INTO t VALUES (1, 1)"})
    assert first.ok, first.observation
    assert [s["tag"] for s in first.detail["statements"]] == ["OK 0", "OK 0", "OK 1"]
    second = await tool.handler({"sql": "SELECT @x + 1 AS y, count(*) AS n FROM t; ROLLBACK"})
    assert second.ok
    assert second.observation.splitlines()[:3] == ["y | n", "42 | 1", "(1 row)"]
    third = await tool.handler({"sql": "SELECT count(*) AS n FROM t"})
    assert "0\n(1 row)" in third.observation  # the transaction of the earlier call rolled back
    assert first.detail["pid"] == third.detail["pid"]
    assert first.detail["role"] == AGENT_USER


async def test_an_error_stops_the_call_with_the_code(session: TidbSqlSession) -> None:
    result = await session.execute({"sql": "SELECT 1; SELEC 2; SELECT 3"})
    assert not result.ok
    assert "ERROR 1064:" in result.observation
    assert "(1 later statement(s) not executed)" in result.observation
    assert result.detail["statements"][1]["code"] == 1064
    denied = await session.execute({"sql": "SELECT * FROM mysql.user"})
    assert not denied.ok and "ERROR 1142:" in denied.observation


async def test_the_per_call_limit_kills_the_query_and_keeps_the_session(
    session: TidbSqlSession,
) -> None:
    slow = await session.execute({"sql": "SET @kept = 7; SELECT SLEEP(20)", "timeout_s": 0.5})
    assert not slow.ok
    assert "cancelled after" in slow.observation
    after = await session.execute({"sql": "SELECT @kept AS kept"})
    assert after.ok and "7\n(1 row)" in after.observation
    assert after.detail["pid"] == slow.detail["pid"]
    assert "reconnected" not in after.observation


async def test_the_trace_records_limits_and_the_sessions_a_kill_could_hit(
    session: TidbSqlSession, server: TidbServer
) -> None:
    admin = await server.connect()
    try:
        await execute(admin, "CREATE USER IF NOT EXISTS app IDENTIFIED BY 'app-pw'")
        await execute(admin, "GRANT SELECT ON shop.* TO app")
    finally:
        admin.close()
    other = await server.endpoint("shop").raw_connect("app", "app-pw")
    harness = await server.connect()
    try:
        other_id = await fetch_value(other, "SELECT CONNECTION_ID()")
        result = await session.execute(
            {"sql": f"SET tidb_mem_quota_query = 1073741824; KILL {other_id}"}
        )
        assert result.ok, result.observation
        assert result.detail["settings_before"]["tidb_mem_quota_query"]
        assert "max_execution_time" in result.detail["settings_before"]
        ids = [b["pid"] for b in result.detail["backends_before"]]
        assert other_id in ids and result.detail["pid"] in ids
        again = await session.execute({"sql": "SELECT @@tidb_mem_quota_query AS q"})
        assert again.detail["settings_before"]["tidb_mem_quota_query"] == "1073741824"
        # the harness's own sessions are out of the agent's reach
        harness_id = await fetch_value(harness, "SELECT CONNECTION_ID()")
        refused = await session.execute({"sql": f"KILL {harness_id}"})
        assert not refused.ok and "RESTRICTED_CONNECTION_ADMIN" in refused.observation
        assert await fetch_value(harness, "SELECT 1") == 1
        assert not await _alive(other)  # the KILL ended the application's session
    finally:
        other.close()
        harness.close()


async def _alive(conn: object) -> bool:
    try:
        return await fetch_value(conn, "SELECT 1") == 1
    except Exception:
        return False


async def test_the_harness_variables_are_set_back(
    session: TidbSqlSession, server: TidbServer
) -> None:
    result = await session.execute({"sql": "SET GLOBAL tidb_enable_stmt_summary = OFF"})
    assert result.ok
    restored = result.detail["harness_variables_restored"]
    assert set(restored) == {"tidb_enable_stmt_summary"}
    assert "set back tidb_enable_stmt_summary" in result.observation
    conn = await server.connect()
    try:
        assert await fetch_value(conn, "SELECT @@global.tidb_enable_stmt_summary") in (1, "ON")
    finally:
        conn.close()
    plain = await session.execute({"sql": "SET GLOBAL tidb_gc_life_time = '20m'"})
    assert "harness_variables_restored" not in plain.detail
