"""A real embedded TiDB server for tests: started, with a ``shop`` database and the agent's
cloud-DBA user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from dbaops.dbms.tidb.agent_role import grant_tidb_dba
from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.dbms.tidb.endpoint import execute
from dbaops.dbms.tidb.server import TidbServer

#: The agent user's name and password on test servers.
AGENT_USER = "dba_agent"
AGENT_PASSWORD = "agent-pw"


@asynccontextmanager
async def tidb_with_agent(name: str, binary: TidbBinary) -> AsyncIterator[TidbServer]:
    """The embedded server ``name``, started, with ``shop.t (id, v)`` (indexed on ``v``) and
    the agent's user; stopped at the end."""
    server = await TidbServer.open(name, binary)
    server.acquire()
    try:
        await server.start()
        conn = await server.connect()
        try:
            await execute(conn, "CREATE DATABASE IF NOT EXISTS shop")
            await execute(
                conn, "CREATE TABLE IF NOT EXISTS shop.t (id INT PRIMARY KEY, v INT, KEY v (v))"
            )
            await grant_tidb_dba(conn, AGENT_USER, AGENT_PASSWORD, databases=["shop"])
        finally:
            conn.close()
        yield server
    finally:
        await server.dispose()
