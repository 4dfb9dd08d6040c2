"""The agent's role cannot escalate, on every major the machine has.

On PostgreSQL 15, CREATEROLE may grant any non-superuser role, so dbaops' server loads its
role guard; from 16 on, the server itself grants only roles a CREATEROLE role administers.
Either way the cloud-DBA role manages the application's roles (what its tickets need) and
gets nothing more: no server-file or program role, directly, through a role it makes, or
from inside dynamic SQL, and nothing of the harness's own role.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dbaops.dbms.postgres.agent_role import forbidden_memberships
from dbaops.dbms.postgres.binaries import installed_majors
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.harness_role import HARNESS_ROLE
from dbaops.dbms.postgres.role_guard import needs_guard
from dbaops.testing.shop import small_shop

pytestmark = pytest.mark.anyio


def _hidden(sql: str) -> str:
    encoded = base64.b64encode(sql.encode()).decode()
    return f"DO $$ BEGIN EXECUTE convert_from(decode('{encoded}', 'base64'), 'UTF8'); END $$"


ESCALATIONS = (
    "GRANT pg_execute_server_program TO dba_agent",
    "GRANT pg_read_server_files, pg_write_server_files TO dba_agent",
    _hidden("GRANT pg_execute_server_program TO dba_agent"),
    "CREATE ROLE helper IN ROLE pg_execute_server_program",
    f"GRANT {HARNESS_ROLE} TO dba_agent",
    f"ALTER ROLE {HARNESS_ROLE} NOLOGIN",
    f"ALTER ROLE {HARNESS_ROLE} PASSWORD 'x'",
    f"ALTER ROLE {HARNESS_ROLE} SET search_path = public, pg_catalog",
    f"ALTER ROLE {HARNESS_ROLE} RENAME TO watcher",
    f"DROP ROLE {HARNESS_ROLE}",
    "ALTER ROLE dba_agent SUPERUSER",
    # parameters a managed service keeps (only an allow-list is granted)
    "ALTER SYSTEM SET search_path = public, pg_catalog",
    "SET session_replication_role = replica",
    "ALTER SYSTEM SET zero_damaged_pages = on",
    "ALTER SYSTEM SET exit_on_error = on",
    "ALTER SYSTEM SET lc_messages = 'de_DE.UTF-8'",
    "ALTER SYSTEM SET log_statement = 'none'",
)

#: What the library's tickets need of role administration.
ROLE_ADMINISTRATION = (
    "ALTER ROLE reporting CONNECTION LIMIT 15",
    "ALTER ROLE analyst SET idle_in_transaction_session_timeout = '10min'",
    "CREATE ROLE loyalty_rw NOLOGIN",
    "GRANT loyalty_rw TO svc_notify",
    "ALTER SYSTEM SET work_mem = '8MB'",
    "ALTER SYSTEM RESET work_mem",
)


@pytest.fixture(params=sorted(installed_majors()), ids=lambda m: f"pg{m}")
async def shop(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Endpoint, int]]:
    binaries = installed_majors()[request.param]
    async with small_shop(f"t-guard-pg{binaries.major}", binaries) as endpoint:
        yield endpoint, binaries.major


async def test_no_escalation_and_the_harness_role_is_out_of_reach(
    shop: tuple[Endpoint, int],
) -> None:
    endpoint, major = shop
    agent = await endpoint.connect("dba_agent", "dba_agent")
    try:
        for sql in ESCALATIONS:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await agent.execute(sql)
        for sql in ROLE_ADMINISTRATION:
            await agent.execute(sql)
        guard = await agent.fetchval("SELECT current_setting('dbaops_guard.protected_roles', true)")
    finally:
        await agent.close()
    assert (guard == HARNESS_ROLE) == needs_guard(major)
    admin = await endpoint.harness_connect(admin=True)
    try:
        assert await forbidden_memberships(admin, "dba_agent") == []
        assert await admin.fetchval(
            "SELECT rolcreaterole FROM pg_catalog.pg_roles WHERE rolname = 'dba_agent'"
        )
        assert await admin.fetchval(
            "SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = $1", HARNESS_ROLE
        )
    finally:
        await admin.close()
