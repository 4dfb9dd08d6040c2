"""Where and how to connect: the one object workloads, actors, checks and tools share."""

from __future__ import annotations

import asyncpg
from pydantic import BaseModel, Field


class Endpoint(BaseModel):
    """A PostgreSQL server address and the fixture database; roles are chosen per connection."""

    host: str
    port: int
    database: str
    admin_user: str = "postgres"
    password: str | None = None
    ssl: bool | None = Field(
        default=False,
        description="False for loopback servers (skips the TLS probe); None: asyncpg's default",
    )

    async def connect(
        self,
        role: str | None = None,
        application_name: str = "dbaops",
        database: str | None = None,
        connect_timeout_s: float = 30.0,
    ) -> asyncpg.Connection:
        return await asyncpg.connect(
            host=self.host,
            port=self.port,
            user=role or self.admin_user,
            password=self.password,
            database=database or self.database,
            server_settings={"application_name": application_name},
            timeout=connect_timeout_s,
            ssl=self.ssl,
        )

    async def pool(
        self, role: str, application_name: str, size: int, database: str | None = None
    ) -> asyncpg.Pool:
        return await asyncpg.create_pool(
            host=self.host,
            port=self.port,
            user=role,
            password=self.password,
            database=database or self.database,
            server_settings={"application_name": application_name},
            min_size=0,
            max_size=size,
            ssl=self.ssl,
            reset=_light_reset,
        )


async def _light_reset(conn: asyncpg.Connection) -> None:
    """Workload templates never change session state, so releasing a connection only needs to
    end a transaction left open by a cancelled unit; asyncpg's default reset adds a round trip
    (``RESET ALL; UNLISTEN *; ...``) to every transaction."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")
