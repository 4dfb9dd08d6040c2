"""Build a workload library's fixture database: roles, schema, seeded data, indexes."""

from __future__ import annotations

import time

import asyncpg

from dbaops.backends.endpoint import Endpoint
from dbaops.workloads.spec import WorkloadLibrary


async def build_fixture(
    endpoint: Endpoint, library: WorkloadLibrary, params: dict[str, int], seed: int
) -> float:
    """(Re)create the fixture database from scratch; returns seconds taken."""
    t0 = time.monotonic()
    admin = await endpoint.connect(database="postgres", application_name="dbaops_prepare")
    try:
        for role in library.roles:
            exists = await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role.name)
            opts = ["SUPERUSER" if role.superuser else "NOSUPERUSER"]
            opts.append("LOGIN" if role.login else "NOLOGIN")
            if role.connection_limit is not None:
                opts.append(f"CONNECTION LIMIT {role.connection_limit}")
            verb = "ALTER" if exists else "CREATE"
            await admin.execute(f'{verb} ROLE "{role.name}" {" ".join(opts)}')
        await admin.execute(f'DROP DATABASE IF EXISTS "{library.database}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{library.database}"')
    finally:
        await admin.close()
    conn = await endpoint.connect(database=library.database, application_name="dbaops_prepare")
    try:
        for sql in (library.schema_sql, library.data_sql, library.post_sql):
            if sql.strip():
                await _execute_script(conn, library.render(sql, params, seed))
    finally:
        await conn.close()
    return time.monotonic() - t0


async def _execute_script(conn: asyncpg.Connection, sql: str) -> None:
    # VACUUM cannot run inside the implicit transaction of a multi-statement simple query.
    chunks = [c for c in sql.split(";\n") if c.strip()]
    for chunk in chunks:
        await conn.execute(chunk)
