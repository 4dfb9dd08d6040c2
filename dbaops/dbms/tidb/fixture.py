"""A workload library's fixture database on TiDB
(:meth:`dbaops.dbms.interface.DatabaseEngine.build_fixture`)."""

from __future__ import annotations

import time

from dbaops.dbms.scripts import execute_script
from dbaops.dbms.tidb.endpoint import TidbEndpoint
from dbaops.dbms.tidb.endpoint import quote_ident as mysql_ident
from dbaops.dbms.tidb.endpoint import quote_literal as mysql_literal
from dbaops.workloads.spec import WorkloadLibrary


async def build_fixture(
    endpoint: TidbEndpoint,
    library: WorkloadLibrary,
    params: dict[str, int],
    seed: int,
    date: str,
) -> float:
    """The fixture on TiDB: its roles as users (no password: they connect on loopback only
    and the agent has no way to log in as another user; ``login: false`` users are locked),
    the database recreated, the library's SQL (TiDB's dialect; it grants the users what they
    need). The agent's ``dba`` user is made by the agent's tools at each run (a fresh
    password), so it is skipped here. Returns seconds taken."""
    t0 = time.monotonic()
    admin = await endpoint.harness_connect()
    try:
        for role in library.roles:
            if role.dba:
                continue
            user = f"{mysql_literal(role.name)}@'%'"
            lock = "ACCOUNT UNLOCK" if role.login else "ACCOUNT LOCK"
            limit = (
                f" WITH MAX_USER_CONNECTIONS {role.connection_limit}"
                if role.connection_limit is not None
                else ""
            )
            await admin.execute(f"DROP USER IF EXISTS {user}")
            await admin.execute(f"CREATE USER {user} IDENTIFIED BY ''{limit} {lock}")
            if role.superuser:
                await admin.execute(f"GRANT ALL ON *.* TO {user}")
        await admin.execute(f"DROP DATABASE IF EXISTS {mysql_ident(library.database)}")
        await admin.execute(f"CREATE DATABASE {mysql_ident(library.database)}")
    finally:
        await admin.close()
    conn = await endpoint.harness_connect(library.database)
    try:
        for sql in (library.schema_sql, library.data_sql, library.post_sql):
            if sql.strip():
                await execute_script(conn, library.render(sql, params, seed, date))
    finally:
        await conn.close()
    return time.monotonic() - t0
