"""PostgreSQL servers a run can use: the embedded cluster (default) or a user's server by DSN."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import anyio
import asyncpg

from dbaops.dbms.postgres.binaries import find_binaries
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.endpoint import Endpoint

if TYPE_CHECKING:
    from dbaops.dbms.interface import ServerRequest


@dataclass
class ClusterSnapshots:
    """The embedded cluster's snapshot group as a :class:`~dbaops.dbms.interface.SnapshotStore`."""

    cluster: PostgresCluster

    @property
    def root(self) -> Path:
        return self.cluster.snapshot_root

    def has(self, key: str) -> bool:
        return self.cluster.has_snapshot(key)

    async def capture(self, key: str) -> float:
        return await self.cluster.capture_snapshot(key)

    async def restore(self, key: str) -> float:
        return await self.cluster.restore_snapshot(key)

    def drop(self, key: str) -> None:
        self.cluster.drop_snapshot(key)

    def lock(self, *, exclusive: bool) -> AbstractAsyncContextManager[None]:
        return self.cluster.snapshot_lock(exclusive=exclusive)


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
                role_secret=self.cluster.secret,
            )
        assert self.external is not None
        return self.external

    @property
    def kind(self) -> str:
        return self.cluster.backend if self.cluster is not None else "external"

    @property
    def host(self) -> PostgresCluster | None:
        """Where host-level faults (signals, disks, limits) act: the embedded cluster."""
        return self.cluster

    @property
    def standby_instance(self) -> PostgresCluster | None:
        """The replica profile's standby (embedded only): its process control."""
        return self.cluster.standby if self.cluster is not None else None

    @property
    def standby_host(self) -> PostgresCluster | None:
        """Where host-level faults on the standby act."""
        return self.standby_instance

    def for_database(self, database: str) -> Endpoint:
        return self.admin.model_copy(update={"database": database})

    def standby_for(self, database: str) -> Endpoint | None:
        """The replica profile's standby (embedded only), or None when the run has none."""
        if self.cluster is None or self.cluster.standby is None:
            return None
        standby = self.cluster.standby
        return self.for_database(database).model_copy(
            update={"host": standby.host, "port": standby.port}
        )

    async def server_version(self) -> str:
        conn = await self.admin.harness_connect(admin=True)  # the monitor may not exist yet
        try:
            return str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()

    @property
    def snapshots(self) -> ClusterSnapshots | None:
        """The embedded cluster's snapshots (an external server has none)."""
        return ClusterSnapshots(self.cluster) if self.cluster is not None else None

    def log_files(self) -> dict[str, Path]:
        """The embedded servers' own log files (an external server's log is not reachable)."""
        if self.cluster is None:
            return {}
        files = {"primary": self.cluster.log_path}
        if self.cluster.standby is not None:
            files["standby"] = self.cluster.standby.log_path
        return files

    async def close(self) -> None:
        """Stop the embedded servers (standby first) and release the cluster."""
        if self.cluster is None:
            return
        try:
            if self.cluster.standby is not None:
                await self.cluster.standby.stop()
            await self.cluster.stop()
            await self.cluster.unmount_volumes()
        finally:
            self.cluster.release()
            await self.cluster.dispose()

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "engine": "postgres",
            "kind": self.kind,
            "host": self.admin.host,
            "port": self.admin.port,
        }
        if self.cluster:
            info.update(
                bindir=str(self.cluster.binaries.bindir),
                binaries_source=self.cluster.binaries.source,
                root=str(self.cluster.root),
                **self.cluster.describe(),
            )
        return info


async def embedded_backend(
    name: str, bindir: Path | None = None, snapshot_group: str | None = None
) -> PostgresBackend:
    """Open (initdb if needed) and start the embedded cluster ``name`` (its snapshots those of
    ``snapshot_group``)."""
    cluster = await PostgresCluster.open(
        name,
        binaries=find_binaries(bindir) if bindir else None,
        snapshot_group=snapshot_group,
    )
    await _start_owned(cluster)
    return PostgresBackend(None, cluster)


async def _start_owned(cluster: PostgresCluster) -> None:
    """Take the cluster for this run and start it (released again if it cannot start)."""
    cluster.acquire()
    try:
        await cluster.start()
    except BaseException:
        cluster.release()
        raise


#: The PostgreSQL major of the docker backend's image (15: bookworm's, 17: trixie's).
CONTAINER_MAJOR_ENV = "DBAOPS_DOCKER_PG_MAJOR"


def container_major(bindir: Path | None) -> int:
    """The major a container server runs: $DBAOPS_DOCKER_PG_MAJOR, else the one of the
    binaries named for the run, else 15 (the design target)."""
    env = os.environ.get(CONTAINER_MAJOR_ENV)
    if env:
        if not env.isdigit():
            raise ValueError(f"{CONTAINER_MAJOR_ENV}={env!r} is not a major version (15, 17)")
        return int(env)
    return find_binaries(bindir).major if bindir else 15


async def container_backend(
    request: ServerRequest, progress: Callable[[str], None] | None = None
) -> PostgresBackend:
    """The embedded cluster ``request.name`` with its server in a container (the image built
    from Debian packages when missing, or ``request.image``), started."""
    from dbaops.dbms.postgres.container import open_container_cluster

    major = container_major(request.bindir)
    cluster = await open_container_cluster(
        request.name,
        major=major,
        resources=request.resources,
        image=request.image,
        snapshot_group=request.snapshot_group,
        progress=progress,
    )
    try:
        await _start_owned(cluster)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await cluster.dispose()
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


def postgres_server(server: object) -> PostgresBackend:
    """``server`` as a PostgreSQL server (what the PostgreSQL-specific parts of a run need:
    preparation, fault actors, the standby); a clear error for another engine's."""
    if not isinstance(server, PostgresBackend):
        raise TypeError(f"{type(server).__name__} is not a PostgreSQL server")
    return server
