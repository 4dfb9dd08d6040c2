"""The harness's least-privilege role: one ordinary monitoring agent, as a managed service runs.

Checks, the metric sampler and the SQL tool's activity snapshots log in as
:data:`HARNESS_ROLE`, never as a superuser: ``pg_monitor`` (every session and statistic),
``pg_read_all_data`` (the reads a check makes), ``BYPASSRLS`` (a row-security policy the agent
adds runs no code in a harness read and hides no row from it), and ``SET`` on the settings
that keep a probe out of the agent's evidence (:data:`~dbaops.dbms.postgres.endpoint.
HIDDEN_SETTINGS`). The fixture's roles that checks probe as get the same ``SET`` grants, since
a role-scoped probe logs in as its role (a ``SET ROLE`` from a privileged session can be
undone by the code it runs).
"""

from __future__ import annotations

import asyncpg

from dbaops.dbms.postgres.endpoint import HIDDEN_SETTINGS, PROBE_SETTINGS, quote_ident

#: The role (and application name) of every harness probe.
HARNESS_ROLE = "pgwatch"

_PREDEFINED = ("pg_monitor", "pg_read_all_data")
_FUNCTIONS = ("pg_catalog.pg_stat_file(text)", "pg_catalog.pg_stat_file(text, boolean)")


async def ensure_harness_role(conn: asyncpg.Connection, probed_roles: list[str]) -> None:
    """Create (or reset) :data:`HARNESS_ROLE` on the server ``conn`` reaches as a superuser,
    and let it and ``probed_roles`` set the hidden probe settings."""
    r = quote_ident(HARNESS_ROLE)
    exists = await conn.fetchval(
        "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1", HARNESS_ROLE
    )
    attributes = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION BYPASSRLS"
    await conn.execute(f"{'ALTER' if exists else 'CREATE'} ROLE {r} {attributes}")
    await conn.execute(f"GRANT {', '.join(_PREDEFINED)} TO {r}")
    for fn in _FUNCTIONS:  # the sampler's file sizes (the server's own files only)
        await conn.execute(f"GRANT EXECUTE ON FUNCTION {fn} TO {r}")
    names = await conn.fetch(
        "SELECT name FROM pg_catalog.pg_settings WHERE name = ANY($1::text[]) ORDER BY name",
        sorted({*HIDDEN_SETTINGS, *PROBE_SETTINGS}),
    )
    grantees = ", ".join(quote_ident(g) for g in [HARNESS_ROLE, *probed_roles])
    if names:
        params = ", ".join(row["name"] for row in names)
        await conn.execute(f"GRANT SET ON PARAMETER {params} TO {grantees}")
