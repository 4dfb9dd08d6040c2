"""``manage_instance`` on TiDB against the real embedded server, and TiDB's log format."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.dbms.tidb.endpoint import fetch_value
from dbaops.dbms.tidb.instance_tool import tidb_instance_tool
from dbaops.dbms.tidb.server import TidbServer
from dbaops.dbms.tidb.serverlog import log_line_stamp
from dbaops.testing.tidb import AGENT_PASSWORD, AGENT_USER, tidb_with_agent

pytestmark = pytest.mark.anyio


def test_log_lines_are_stamped_with_time_and_connection() -> None:
    line = '[2026/12/02 19:57:05.496 +00:00] [WARN] [conn.go:1] ["x"] [conn=3405774860] [a=b]'
    at = datetime(2026, 12, 2, 19, 57, 5, 496000, tzinfo=UTC).timestamp()
    assert log_line_stamp(line) == (at, 3405774860)
    assert log_line_stamp('[2026/12/02 21:57:05.496 +02:00] [INFO] [x.go:1] ["y"]') == (at, 0)
    assert log_line_stamp("goroutine 1 [running]:") is None


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server(tidb_binary: TidbBinary) -> AsyncIterator[TidbServer]:
    async with tidb_with_agent("pytest-tidb-instance", tidb_binary) as started:
        yield started


async def test_the_server_log_is_in_that_format(server: TidbServer) -> None:
    lines = server.log_path.read_text().splitlines()
    assert lines and all(log_line_stamp(line) is not None for line in lines[:50])


async def test_status_and_set_variable(server: TidbServer) -> None:
    tool = tidb_instance_tool(server.endpoint(), server, AGENT_USER, AGENT_PASSWORD)
    status = await tool.handler({"action": "status"})
    assert status.ok and status.detail["running"] is True
    assert "version: 8.0.11-TiDB-" in status.observation
    assert "tidb_gc_life_time = " in status.observation
    done = await tool.handler(
        {"action": "set_variable", "name": "TiDB_GC_Life_Time", "value": "45m"}
    )
    assert done.ok, done.observation
    assert done.detail["sql"] == "SET GLOBAL tidb_gc_life_time = '45m'"
    assert "45m" in done.observation
    conn = await server.connect()
    try:
        assert await fetch_value(conn, "SELECT @@global.tidb_gc_life_time") == "45m0s"
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("no_such_variable", "1"),
        ("tidb_slow_log_threshold", "1"),  # hidden by Security Enhanced Mode
        ("tidb_gc_life_time = '1s'; SET GLOBAL x", "1"),  # not a name
        ("tidb_gc_%", "1"),  # a pattern is not a name
    ],
)
async def test_set_variable_refuses_what_is_not_a_visible_name(
    server: TidbServer, name: str, value: str
) -> None:
    tool = tidb_instance_tool(server.endpoint(), server, AGENT_USER, AGENT_PASSWORD)
    result = await tool.handler({"action": "set_variable", "name": name, "value": value})
    assert not result.ok
    assert "unknown global variable" in result.observation


async def test_the_value_is_a_literal(server: TidbServer) -> None:
    tool = tidb_instance_tool(server.endpoint(), server, AGENT_USER, AGENT_PASSWORD)
    result = await tool.handler(
        {"action": "set_variable", "name": "tidb_gc_life_time", "value": "10m'; DROP TABLE t; --"}
    )
    assert not result.ok  # the server refuses the odd duration; nothing else ran
    conn = await server.connect()
    try:
        tables = "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop'"
        assert await fetch_value(conn, tables + " AND TABLE_NAME = 't'") == 1
    finally:
        conn.close()


async def test_restart_and_an_external_server(server: TidbServer) -> None:
    tool = tidb_instance_tool(server.endpoint(), server, AGENT_USER, AGENT_PASSWORD)
    stopped = await tool.handler({"action": "stop"})
    assert stopped.ok and not server.process_alive()
    down = await tool.handler({"action": "status"})
    assert "server running: False; not accepting connections" in down.observation
    assert (await tool.handler({"action": "start"})).ok
    assert (await tool.handler({"action": "restart"})).ok
    assert server.process_alive()
    external = tidb_instance_tool(server.endpoint(), None, AGENT_USER, AGENT_PASSWORD)
    refused = await external.handler({"action": "restart"})
    assert not refused.ok and "not managed by dbaops" in refused.observation
    assert "unknown (not managed by dbaops)" in (await external.handler({})).observation
