"""Where and how to connect: the one object workloads, actors, checks and tools share.

The harness's own sessions (checks, the metric sampler, preparation, actors' control
connections) connect through :meth:`Endpoint.harness_connect`: they all carry one monitoring
agent's application name and, on a server dbaops manages, session settings that keep them out
of ``pg_stat_statements`` and the server log the agent reads (:data:`HIDDEN_SETTINGS`).
"""

from __future__ import annotations

from typing import Literal

import asyncpg
from pydantic import BaseModel, Field

#: What every harness session calls itself: one monitoring agent, as a managed service runs.
HARNESS_APPLICATION = "pgwatch"

#: What a client sees when its session is gone or unusable (server restarted or stopped,
#: backend terminated, protocol left mid-operation): drop it, and reconnect if it should.
CONNECTION_ERRORS = (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError)

#: Superuser session settings that keep a harness session out of the agent's evidence.
HIDDEN_SETTINGS: dict[str, str] = {
    "pg_stat_statements.track": "none",
    "pg_stat_statements.track_utility": "off",
    "auto_explain.log_min_duration": "-1",
    "log_statement": "none",
    "log_duration": "off",
    "log_min_duration_statement": "-1",
    "log_min_error_statement": "panic",
    "log_min_messages": "panic",
    "log_lock_waits": "off",
}

#: Added for probes that run scenario-specific SQL: their query text stays out of
#: pg_stat_activity (the sampler's generic queries stay visible, as a monitoring agent's do).
PROBE_SETTINGS: dict[str, str] = {"track_activities": "off"}


def quote_ident(name: str) -> str:
    """An SQL identifier, quoted (for the role and object names the harness puts in DDL)."""
    return '"' + name.replace('"', '""') + '"'


class Endpoint(BaseModel):
    """A PostgreSQL server address and the fixture database; roles are chosen per connection."""

    engine: Literal["postgres"] = "postgres"
    host: str
    port: int
    database: str
    admin_user: str = "postgres"
    password: str | None = None
    ssl: bool | None = Field(
        default=False,
        description="False for loopback servers (skips the TLS probe); None: asyncpg's default",
    )
    hide_harness: bool = Field(
        default=False,
        description="apply HIDDEN_SETTINGS to harness sessions (needs a superuser admin)",
    )

    async def harness_connect(
        self,
        database: str | None = None,
        *,
        probe: bool = False,
        role: str | None = None,
        connect_timeout_s: float = 30.0,
        application_name: str = HARNESS_APPLICATION,
    ) -> asyncpg.Connection:
        """A harness session as the admin user: named like a monitoring agent and, when
        ``hide_harness``, invisible in pg_stat_statements and the server log (``probe`` also
        hides its query text from pg_stat_activity). With ``role`` the session then runs
        ``SET ROLE`` to evaluate as that role."""
        settings = {"application_name": application_name}
        if self.hide_harness:
            settings.update(HIDDEN_SETTINGS)
            if probe:
                settings.update(PROBE_SETTINGS)
        conn = await self._open(self.admin_user, database, settings, connect_timeout_s)
        if role is not None and role != self.admin_user:
            try:
                await conn.execute(f"SET ROLE {quote_ident(role)}")
            except BaseException:
                conn.terminate()
                raise
        return conn

    async def connect(
        self,
        role: str | None = None,
        application_name: str = "dbaops",
        database: str | None = None,
        connect_timeout_s: float = 30.0,
    ) -> asyncpg.Connection:
        settings = {"application_name": application_name}
        return await self._open(role or self.admin_user, database, settings, connect_timeout_s)

    async def _open(
        self, user: str, database: str | None, settings: dict[str, str], timeout_s: float
    ) -> asyncpg.Connection:
        return await asyncpg.connect(
            host=self.host,
            port=self.port,
            user=user,
            password=self.password,
            database=database or self.database,
            server_settings=settings,
            timeout=timeout_s,
            ssl=self.ssl,
        )

    async def pool(
        self,
        role: str,
        application_name: str,
        size: int,
        database: str | None = None,
        max_queries: int | None = None,
    ) -> asyncpg.Pool:
        """A pool of ``role``'s connections; ``max_queries`` replaces a connection after that
        many statements (default: asyncpg's)."""
        recycle = {} if max_queries is None else {"max_queries": max_queries}
        return await asyncpg.create_pool(
            host=self.host,
            port=self.port,
            user=role,
            password=self.password,
            database=database or self.database,
            server_settings={"application_name": application_name},
            min_size=0,
            max_size=size,
            **recycle,
            ssl=self.ssl,
            reset=_light_reset,
        )


async def _light_reset(conn: asyncpg.Connection) -> None:
    """Workload templates never change session state, so releasing a connection only needs to
    end a transaction left open by a cancelled unit; asyncpg's default reset adds a round trip
    (``RESET ALL; UNLISTEN *; ...``) to every transaction."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")
