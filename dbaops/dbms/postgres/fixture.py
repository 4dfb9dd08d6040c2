"""A workload library's fixture database on PostgreSQL: roles, schema, seeded data, indexes
(:meth:`dbaops.dbms.interface.DatabaseEngine.build_fixture`)."""

from __future__ import annotations

import time

import asyncpg

from dbaops.dbms.postgres.agent_role import grant_cloud_dba
from dbaops.dbms.postgres.endpoint import Endpoint, quote_ident
from dbaops.dbms.postgres.harness_role import ensure_harness_role
from dbaops.dbms.postgres.passwords import give_passwords
from dbaops.dbms.scripts import execute_script
from dbaops.workloads.spec import RoleSpec, WorkloadLibrary


async def build_fixture(
    endpoint: Endpoint,
    library: WorkloadLibrary,
    params: dict[str, int],
    seed: int,
    date: str,
) -> float:
    """(Re)create the fixture database from scratch, its SQL rendered with ``params``, ``seed``
    and the scenario ``date``; returns seconds taken."""
    t0 = time.monotonic()
    owner = [RoleSpec(name=library.owner, login=False)] if library.owner else []
    admin = await endpoint.harness_connect(database="postgres", admin=True)
    try:
        for role in [*owner, *library.roles]:
            exists = await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role.name)
            opts = ["SUPERUSER" if role.superuser else "NOSUPERUSER"]
            opts.append("LOGIN" if role.login else "NOLOGIN")
            if role.connection_limit is not None:
                opts.append(f"CONNECTION LIMIT {role.connection_limit}")
            verb = "ALTER" if exists else "CREATE"
            await admin.execute(f"{verb} ROLE {quote_ident(role.name)} {' '.join(opts)}")
        probed = [r.name for r in library.roles if r.login and not r.superuser and not r.dba]
        await ensure_harness_role(admin, probed)
        # Every role the fixture made logs in with a password: its own on a server dbaops
        # made (nothing logs in on trust), the DSN's on a user's server that asks for one.
        if endpoint.role_secret is not None or endpoint.password is not None:
            made = [r.name for r in [*owner, *library.roles] if r.login]
            logins = made if endpoint.role_secret is None else [
                r["rolname"]
                for r in await admin.fetch(
                    "SELECT rolname FROM pg_catalog.pg_roles "
                    "WHERE rolcanlogin AND rolname !~ '^pg_'"
                )
            ]  # fmt: skip
            await give_passwords(admin, endpoint.role_secret, logins, shared=endpoint.password)
        await admin.execute(f'DROP DATABASE IF EXISTS "{library.database}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{library.database}"')
    finally:
        await admin.close()
    conn = await endpoint.harness_connect(database=library.database, admin=True)
    try:
        # The library's own SQL names its objects as an application's does (nothing of the
        # agent exists yet: the fixture is built before any agent runs).
        await conn.execute("SET search_path = public")
        for sql in (library.schema_sql, library.data_sql, library.post_sql):
            if sql.strip():
                await execute_script(conn, library.render(sql, params, seed, date))
        await conn.execute("RESET search_path")
        if library.owner is not None:
            await _give_schema_to(conn, library.owner)
        managed = [r.name for r in library.roles if not r.dba and not r.superuser]
        for role in library.roles:
            if role.dba:
                await grant_cloud_dba(conn, role.name, owner=library.owner, managed_roles=managed)
    finally:
        await conn.close()
    return time.monotonic() - t0


async def _give_schema_to(conn: asyncpg.Connection, owner: str) -> None:
    """Make ``owner`` own the public schema's tables, sequences and views (their indexes
    follow their tables) and let it create objects there. An extension's objects (the
    ``pg_stat_statements`` views) stay the superuser's: a role the agent holds could otherwise
    redefine what every reader of them, the harness included, runs."""
    rows = await conn.fetch(
        "SELECT c.relkind::text AS relkind, quote_ident(c.relname) AS name FROM pg_class c "
        "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v', 'm') "
        "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'a' "
        "AND d.classid = 'pg_class'::regclass AND c.relkind = 'S') "
        "AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.objid = c.oid AND e.deptype = 'e' "
        "AND e.classid = 'pg_class'::regclass)"
    )
    kinds = {"r": "TABLE", "p": "TABLE", "S": "SEQUENCE", "v": "VIEW", "m": "MATERIALIZED VIEW"}
    who = quote_ident(owner)
    for row in rows:
        await conn.execute(f"ALTER {kinds[row['relkind']]} public.{row['name']} OWNER TO {who}")
    await conn.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {who}")
