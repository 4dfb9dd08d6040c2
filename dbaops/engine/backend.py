"""Backends the runner can use: the embedded cluster (default) or a user's server by DSN."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import asyncpg

from dbaops.backends.endpoint import Endpoint
from dbaops.backends.postgres.binaries import find_binaries
from dbaops.backends.postgres.cluster import PostgresCluster


@dataclass
class PostgresBackend:
    """An admin endpoint plus, for the embedded cluster, instance control and snapshots."""

    external: Endpoint | None  # database = "postgres"
    cluster: PostgresCluster | None

    @property
    def admin(self) -> Endpoint:
        """Admin endpoint (database "postgres"); follows the embedded server's current port."""
        if self.cluster is not None:
            return Endpoint(
                host=self.cluster.host,
                port=self.cluster.port,
                database="postgres",
                hide_harness=True,
            )
        assert self.external is not None
        return self.external

    @property
    def kind(self) -> str:
        return "embedded" if self.cluster else "external"

    def for_database(self, database: str) -> Endpoint:
        return self.admin.model_copy(update={"database": database})

    def standby_for(self, database: str) -> Endpoint | None:
        """The replica profile's standby (embedded only), or None when the run has none."""
        if self.cluster is None or self.cluster.standby is None:
            return None
        return self.for_database(database).model_copy(update={"port": self.cluster.standby.port})

    async def server_version(self) -> str:
        conn = await self.admin.harness_connect()
        try:
            return str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": self.kind, "host": self.admin.host, "port": self.admin.port}
        if self.cluster:
            info.update(
                bindir=str(self.cluster.binaries.bindir),
                binaries_source=self.cluster.binaries.source,
                root=str(self.cluster.root),
            )
        return info


async def embedded_backend(name: str, bindir: Path | None = None) -> PostgresBackend:
    """Open (initdb if needed) and start the embedded cluster ``name``."""
    cluster = await PostgresCluster.open(name, binaries=find_binaries(bindir) if bindir else None)
    cluster.acquire()
    try:
        await cluster.start()
    except BaseException:
        cluster.release()
        raise
    return PostgresBackend(None, cluster)


async def external_backend(dsn: str) -> PostgresBackend:
    """A user's own server; instance control and file snapshots are unavailable."""
    url = urlparse(dsn)
    endpoint = Endpoint(
        host=url.hostname or "127.0.0.1",
        port=url.port or 5432,
        database="postgres",
        admin_user=url.username or "postgres",
        password=url.password,
        ssl=None,
    )
    conn = await asyncpg.connect(dsn)
    await conn.close()
    return PostgresBackend(endpoint, None)
