"""Connecting to a TiDB server over the MySQL protocol (aiomysql)."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import aiomysql
import pymysql
from pydantic import BaseModel, Field

from dbaops.dbms.tidb.connection import MysqlConnection, translate_error
from dbaops.dbms.tidb.sqltext import quote_ident as quote_ident  # the harness's names for them
from dbaops.dbms.tidb.sqltext import quote_literal as quote_literal

#: Errors that mean the connection (not the statement) failed.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    pymysql.err.OperationalError,
    pymysql.err.InterfaceError,
)


#: TiDB's default SQL mode (ANSI_QUOTES would read a check's "text" as a column).
DEFAULT_SQL_MODE = (
    "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"
)
#: The harness sessions' own settings, pinned at connect as PostgreSQL's search path is: a new
#: session copies the GLOBAL values, which the agent may set (SYSTEM_VARIABLES_ADMIN). No
#: statement time limit and TiDB's default memory quota; and what would change what a check
#: reads or whether a fault's write lands: autocommit (off, a check reads one old snapshot
#: and a fault's writes never commit), the SQL mode, a row cap on every SELECT, the length
#: of a GROUP_CONCAT (the catalog fingerprint's grants), the time zone (``NOW()`` against
#: stored times), the isolation level, division's precision.
HARNESS_SESSION = (
    "SET SESSION max_execution_time = 0, tidb_mem_quota_query = 1073741824, autocommit = 1, "
    f"sql_mode = '{DEFAULT_SQL_MODE}', sql_select_limit = 18446744073709551615, "
    "group_concat_max_len = 4194304, time_zone = 'SYSTEM', "
    "transaction_isolation = 'REPEATABLE-READ', div_precision_increment = 4"
)


class TidbEndpoint(BaseModel):
    """Where a TiDB server listens, and as whom the harness connects."""

    engine: Literal["tidb"] = "tidb"
    host: str = "127.0.0.1"
    port: int
    database: str | None = None
    user: str = "root"
    password: str | None = None
    status_port: int | None = Field(default=None, description="HTTP status port (metrics)")

    def for_database(self, database: str) -> TidbEndpoint:
        return self.model_copy(update={"database": database})

    async def raw_connect(
        self,
        user: str | None = None,
        password: str | None = None,
        *,
        database: str | None = None,
        connect_timeout_s: float = 10.0,
    ) -> Any:
        """An autocommit aiomysql connection (as ``user``, default the harness's)."""
        return await aiomysql.connect(
            host=self.host,
            port=self.port,
            user=user or self.user,
            password=(password if user else self.password) or "",
            db=database or self.database,
            autocommit=True,
            connect_timeout=connect_timeout_s,
            charset="utf8mb4",
        )

    async def harness_connect(
        self,
        database: str | None = None,
        *,
        admin: bool = False,
        probe: bool = False,
        role: str | None = None,
        connect_timeout_s: float = 30.0,
        application_name: str = "",
    ) -> MysqlConnection:
        """A harness session (the runner's checks, actors, preparation) as the harness's user,
        or, with ``role``, as that fixture user. Its session limits are the harness's own
        (:data:`HARNESS_SESSION`), so a fault or the agent changing the global memory quota or
        statement time limit does not cut off the harness's checks. ``admin`` changes nothing
        here: the harness has one user on TiDB (its sessions are out of the agent's KILL)."""
        del admin
        conn = await self._session(role, database, connect_timeout_s)
        try:
            await conn.execute(HARNESS_SESSION)
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
    ) -> MysqlConnection:
        """A client session as fixture user ``role`` (the workloads' and actors' sessions;
        TiDB has no application name, so ``application_name`` is not sent)."""
        return await self._session(role, database, connect_timeout_s)

    async def role_session(
        self,
        role: str,
        database: str | None = None,
        *,
        application_name: str = "",
        probe: bool = False,
        pinned: bool = True,
        connect_timeout_s: float = 30.0,
    ) -> MysqlConnection:
        """A harness session as fixture user ``role`` with the harness's session limits (TiDB
        resolves no routine through a path: ``pinned`` has nothing to pin)."""
        del pinned
        return await self.harness_connect(
            database, probe=probe, role=role, connect_timeout_s=connect_timeout_s
        )

    async def probe_session(
        self, role: str, database: str | None = None, *, login: bool = False
    ) -> MysqlConnection:
        """A check's session as fixture user ``role`` (the harness's user for "postgres"):
        with the harness's session limits, or with ``login`` an ordinary session of the user
        (its own limits apply)."""
        if login:
            return await self.connect(role, "pgwatch", database)
        return await self.harness_connect(database, probe=True, role=role)

    async def catalog_state(self) -> dict[str, dict[str, str]] | None:
        """The server's catalog fingerprint, read in a harness session as the harness's user
        (see :mod:`dbaops.dbms.tidb.catalog_state`)."""
        from dbaops.dbms.tidb.catalog_state import catalog_state

        conn = await self.harness_connect(probe=True, connect_timeout_s=10)
        try:
            return await catalog_state(conn)
        finally:
            await conn.close()

    async def identify(self, conn: MysqlConnection) -> tuple[int, str]:
        """A session's connection id and start, asked on the session itself (the agent's
        statements summary is cleared when it starts)."""
        row = await conn.fetchrow(
            "SELECT CONNECTION_ID() AS pid, CAST(NOW(6) AS CHAR) AS backend_start"
        )
        assert row is not None
        return int(row["pid"]), str(row["backend_start"])

    async def actor_session(
        self, role: str, application_name: str = "dbaops", database: str | None = None
    ) -> MysqlConnection:
        """A fault actor's session as fixture user ``role`` (TiDB resolves no routine or
        operator through a path, so it is an ordinary client session)."""
        return await self.connect(role, application_name, database)

    async def _session(
        self, role: str | None, database: str | None, timeout_s: float
    ) -> MysqlConnection:
        # "postgres", the scenario model's default role, means the harness's own user here too
        user = role if role and role not in (self.user, "postgres") else None
        try:
            raw = await self.raw_connect(
                user, "" if user else None, database=database, connect_timeout_s=timeout_s
            )
        except pymysql.err.MySQLError as exc:
            lost = translate_error(exc)
            raise lost from exc
        return MysqlConnection(raw)


# The harness's own statements: the server's warnings (``Note 1976 User ... does not exist``
# after ``DROP USER IF EXISTS``) are not the harness's to print; aiomysql raises them as Python
# warnings.


async def fetch_all(conn: Any, sql: str, args: Any = None) -> list[dict[str, Any]]:
    """Run ``sql`` on an aiomysql connection; its rows as dicts."""
    with warnings.catch_warnings(action="ignore"):
        async with conn.cursor(aiomysql.DictCursor) as cur:
            await cur.execute(sql, args)
            return list(await cur.fetchall())


async def fetch_value(conn: Any, sql: str, args: Any = None) -> Any:
    """The first column of the first row of ``sql`` (None when no row)."""
    with warnings.catch_warnings(action="ignore"):
        async with conn.cursor() as cur:
            await cur.execute(sql, args)
            row = await cur.fetchone()
            return None if row is None else row[0]


async def execute(conn: Any, sql: str, args: Any = None) -> int:
    """Run a statement; the number of affected rows."""
    with warnings.catch_warnings(action="ignore"):
        async with conn.cursor() as cur:
            return int(await cur.execute(sql, args))
