"""Where and how to connect: the one object workloads, actors, checks and tools share.

The harness's own sessions (checks, the metric sampler, preparation, actors' control
connections) connect through :meth:`Endpoint.harness_connect` or, acting as one of the
fixture's roles, :meth:`Endpoint.role_session`. Every one of them runs with
``search_path = pg_catalog, pg_temp`` (:data:`HARNESS_SEARCH_PATH`) from its first statement,
so nothing the agent plants in a schema it can create in (a same-name function, aggregate or
operator with a closer type match) is ever resolved by harness SQL, which names business
objects with their schema. Probes and the sampler log in as the least-privilege monitoring
role (:attr:`Endpoint.monitor_user`); the superuser is for preparation and fault injection
only (``admin=True``). They all carry one monitoring agent's application name and, on a
server dbaops manages, session settings that keep them out of ``pg_stat_statements`` and the
server log the agent reads (:data:`HIDDEN_SETTINGS`).
"""

from __future__ import annotations

from typing import Literal

import asyncpg
from pydantic import BaseModel, Field

from dbaops.dbms.postgres.passwords import role_password
from dbaops.dbms.postgres.search_path import HARNESS_SEARCH_PATH
from dbaops.dbms.postgres.sqltext import quote_ident as quote_ident  # the harness's name for it

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

_TRACK, _UNTRACKED = "pg_stat_statements.track", "none"

#: Added for probes that run scenario-specific SQL: their query text stays out of
#: pg_stat_activity (the sampler's generic queries stay visible, as a monitoring agent's do).
PROBE_SETTINGS: dict[str, str] = {"track_activities": "off"}


class Endpoint(BaseModel):
    """A PostgreSQL server address and the fixture database; roles are chosen per connection."""

    engine: Literal["postgres"] = "postgres"
    host: str
    port: int
    database: str
    admin_user: str = "postgres"
    password: str | None = Field(
        default=None, repr=False, description="one password for every role (a user's server)"
    )
    role_secret: str | None = Field(
        default=None,
        repr=False,
        description="what each role's own password derives from (a server dbaops made: "
        "dbaops.dbms.postgres.passwords); never recorded",
    )
    ssl: bool | None = Field(
        default=False,
        description="False for loopback servers (skips the TLS probe); None: asyncpg's default",
    )
    hide_harness: bool = Field(
        default=False,
        description="apply HIDDEN_SETTINGS to harness sessions (the server grants them to "
        "the harness's roles: a superuser admin, or the monitoring role)",
    )
    monitor_user: str | None = Field(
        default=None,
        description="the least-privilege harness role that probes and samples (None: the "
        "admin user, on a server whose fixture dbaops did not make)",
    )

    def password_of(self, role: str) -> str | None:
        """The password ``role`` logs in with."""
        if self.role_secret is not None:
            return role_password(self.role_secret, role)
        return self.password

    def _hidden(self, probe: bool) -> dict[str, str]:
        if not self.hide_harness:
            return {}
        return {**HIDDEN_SETTINGS, **(PROBE_SETTINGS if probe else {})}

    async def harness_connect(
        self,
        database: str | None = None,
        *,
        admin: bool = False,
        probe: bool = False,
        role: str | None = None,
        connect_timeout_s: float = 30.0,
        application_name: str = HARNESS_APPLICATION,
    ) -> asyncpg.Connection:
        """A harness session with the harness's search path, named like a monitoring agent
        and, when ``hide_harness``, invisible in pg_stat_statements and the server log
        (``probe`` also hides its query text from pg_stat_activity). It logs in as the
        monitoring role, or with ``admin`` as the superuser (preparation, fault injection,
        the control plane). ``role`` (admin sessions only) then runs ``SET ROLE`` so that
        role's privileges decide what harness-written statements may do; ``SET ROLE`` is no
        sandbox, so such a session must never run SQL that could resolve the agent's code
        (the search path sees to functions and operators; never read a view or table the
        agent can change in one)."""
        settings = {"application_name": application_name, "search_path": HARNESS_SEARCH_PATH}
        settings.update(self._hidden(probe))
        user = self.admin_user if admin or self.monitor_user is None else self.monitor_user
        if role is not None and not admin:
            raise ValueError("a role-scoped probe logs in as the role: use role_session")
        conn = await self._open(user, database, settings, connect_timeout_s)
        if role is not None and role != user:
            try:
                await conn.execute(f"SET ROLE {quote_ident(role)}")
            except BaseException:
                conn.terminate()
                raise
        return conn

    async def role_session(
        self,
        role: str,
        database: str | None = None,
        *,
        application_name: str = HARNESS_APPLICATION,
        probe: bool = False,
        pinned: bool = True,
        connect_timeout_s: float = 30.0,
    ) -> asyncpg.Connection:
        """A harness session logged in as ``role`` (its per-role settings apply, and code it
        runs cannot ``RESET ROLE`` to anything more), with the harness's search path. A
        ``probe`` is hidden as :meth:`harness_connect`'s are (the fixture grants those
        settings to its roles); otherwise (a fault's actor) it is an ordinary session the
        agent can see. ``pinned=False`` keeps the role's own search path, for the application's
        own SQL computed as the application would (an OLAP job's reference result): what it
        resolves is what the application's sessions resolve, with the role's privileges."""
        settings = {"application_name": application_name}
        if pinned:
            settings["search_path"] = HARNESS_SEARCH_PATH
        hidden = self._hidden(probe) if probe else {}
        return await self._open_as(role, database, settings, hidden, connect_timeout_s)

    async def _open_as(
        self,
        role: str,
        database: str | None,
        settings: dict[str, str],
        hidden: dict[str, str],
        timeout_s: float,
    ) -> asyncpg.Connection:
        """A session of ``role`` with ``hidden`` settings too where the role may set them (the
        fixture grants them to its roles); a role it did not (the agent's own, one a scenario
        made) gets an ordinary session."""
        if hidden:
            try:
                return await self._open(role, database, {**settings, **hidden}, timeout_s)
            except asyncpg.InsufficientPrivilegeError:
                pass
        return await self._open(role, database, settings, timeout_s)

    async def probe_session(
        self, role: str, database: str | None = None, *, login: bool = True
    ) -> asyncpg.Connection:
        """A check's hidden session: the monitoring role for the admin user (a check's default
        role), else logged in as ``role`` itself, never ``SET ROLE`` from a privileged session
        (code the probe runs could ``RESET ROLE``). ``login`` is always so here; the argument
        is the engine-neutral check's."""
        del login
        if role == self.admin_user:
            return await self.harness_connect(database, probe=True)
        return await self.role_session(role, database, probe=True)

    async def catalog_state(self) -> dict[str, dict[str, str]] | None:
        """The fixture database's catalog fingerprint, read by the superuser in a harness
        session (see :mod:`dbaops.dbms.postgres.catalog_state`)."""
        from dbaops.dbms.postgres.catalog_state import catalog_state

        conn = await self.harness_connect(admin=True, probe=True, connect_timeout_s=10)
        try:
            return await catalog_state(conn)
        finally:
            await conn.close()

    async def identify(self, conn: asyncpg.Connection) -> tuple[int, str]:
        """An actor session's server pid and start time, asked on the session itself while its
        statement statistics are off (an actor session starts with them off where its role
        may set that, :meth:`actor_session`), then switched back on: no harness query shows
        in its role's statistics, and no connection slot is taken beside the actor's own."""
        row = await conn.fetchrow(
            "SELECT pid, backend_start::text AS backend_start, "
            "pg_catalog.current_setting($1, true) AS track FROM pg_catalog.pg_stat_activity "
            "WHERE pid = pg_catalog.pg_backend_pid()",
            _TRACK,
        )
        assert row is not None
        if row["track"] == _UNTRACKED:
            await conn.execute(f"RESET {_TRACK}")
        return int(row["pid"]), str(row["backend_start"])

    async def actor_session(
        self, role: str, application_name: str = "psql", database: str | None = None
    ) -> asyncpg.Connection:
        """A fault actor's session as ``role``: what the scenario injects, visible to the agent
        as any client session is, with the harness's search path (its SQL names business
        objects with their schema; the superuser's actors never resolve the agent's code). It
        starts with its statement statistics off, which :meth:`identify` turns back on."""
        settings = {"application_name": application_name, "search_path": HARNESS_SEARCH_PATH}
        untracked = {_TRACK: _UNTRACKED} if self.hide_harness else {}  # until identify()
        return await self._open_as(role, database, settings, untracked, 30.0)

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
            password=self.password_of(user),
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
            password=self.password_of(role),
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
