"""The embedded cluster with its server inside a Docker container (``--backend docker``).

The container changes where the server runs, not how dbaops controls it: the cluster directory
(data, sockets, WAL archive) is bind-mounted at the same path inside the container, the
container shares the host's network and process namespaces, and the server tools (initdb,
pg_ctl, pg_basebackup) run in it by ``docker exec`` as the cluster's service user. So ports,
paths, process ids and the server log are the embedded cluster's, and everything built on them
(snapshots, the log follower, backend signals) works unchanged, while the server is confined by
the container's resource limits (CPUs, memory: a real OOM kill) and can suffer what only a
machine suffers: a freeze (``docker pause``) and a crash (``docker kill``: every process of the
server dies at once, and the next start runs crash recovery).

The container's main process is ``sleep``; the postmaster is started in it by ``pg_ctl``. When
the main process dies (a kill), the container runtime kills every process of the container.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import structlog
from pydantic import BaseModel

from dbaops.containers.daemon import open_docker
from dbaops.containers.images import PostgresImage, Progress, ensure_postgres_image
from dbaops.containers.resources import ServerResources
from dbaops.dbms.postgres.binaries import PgBinaries
from dbaops.dbms.postgres.cluster import (
    SERVER_ENVIRONMENT,
    ClusterError,
    PostgresCluster,
    cluster_paths,
    dbaops_home,
)
from dbaops.dbms.postgres.osuser import ensure_service_user, running_as_root

log = structlog.get_logger(__name__)

#: Labels on every container dbaops makes (``dbaops cleanup`` and the tests find them by it).
CONTAINER_LABEL = "dbaops.cluster"


class ContainerState(BaseModel):
    """What ``manage_instance status`` shows of a container."""

    name: str
    status: str  # running | paused | exited | missing
    exit_code: int | None = None
    oom_killed: bool = False
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    memory_usage_mb: float | None = None


class ContainerCluster(PostgresCluster):
    """An embedded cluster whose server runs in its own container."""

    def __init__(
        self,
        root: Path,
        binaries: PgBinaries,
        os_user: str | None,
        snapshot_root: Path | None = None,
        *,
        docker: aiodocker.Docker,
        image: PostgresImage,
        resources: ServerResources,
        role: str = "primary",
    ) -> None:
        self.docker = docker
        self.image = image
        self.resources = resources
        self.role = role
        self.container_name = f"dbaops-{root.parent.name if role == 'standby' else root.name}"
        if role == "standby":
            self.container_name += "-standby"
        super().__init__(root, binaries, os_user, snapshot_root)

    def _standby_at(self, root: Path) -> PostgresCluster:
        return ContainerCluster(
            root,
            self.binaries,
            self.os_user,
            docker=self.docker,
            image=self.image,
            resources=self.resources,
            role="standby",
        )

    # -- the container ----------------------------------------------------------------------
    def _ids(self) -> tuple[int, int]:
        if self.os_user is None:
            return os.getuid(), os.getgid()
        entry = pwd.getpwnam(self.os_user)
        return entry.pw_uid, entry.pw_gid

    def _config(self) -> dict[str, Any]:
        uid, gid = self._ids()
        # The service user must have a name inside the container (initdb looks it up).
        init = (
            f"grep -q '^dbaops:' /etc/passwd || "
            f"echo 'dbaops:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin' >> /etc/passwd; "
            f"grep -q '^dbaops:' /etc/group || echo 'dbaops:x:{gid}:' >> /etc/group; "
            "exec sleep infinity"
        )
        host: dict[str, Any] = {
            "NetworkMode": "host",
            "PidMode": "host",
            "Binds": [f"{self.root}:{self.root}"],
            "ShmSize": self.resources.shm_mb << 20,
        }
        if self.resources.cpus is not None:
            host["NanoCpus"] = int(self.resources.cpus * 1e9)
        if self.resources.memory_mb is not None:
            host["Memory"] = self.resources.memory_mb << 20
            host["MemorySwap"] = self.resources.memory_mb << 20  # no swap
        return {
            "Image": self.image.tag,
            "Entrypoint": [],
            "Cmd": ["sh", "-c", init],
            "Labels": {CONTAINER_LABEL: str(self.root), "dbaops.role": self.role},
            "HostConfig": host,
        }

    async def _container(self) -> aiodocker.containers.DockerContainer | None:
        try:
            return await self.docker.containers.get(self.container_name)
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise ClusterError(f"container {self.container_name}: {exc}") from exc

    async def container_state(self) -> ContainerState:
        """The container's state and resource use (``missing`` when there is none)."""
        container = await self._container()
        state = ContainerState(
            name=self.container_name,
            status="missing",
            cpu_limit=self.resources.cpus,
            memory_limit_mb=self.resources.memory_mb,
        )
        if container is None:
            return state
        info = await container.show()
        st = info["State"]
        state.status = str(st.get("Status", "unknown"))
        state.exit_code = st.get("ExitCode") if state.status == "exited" else None
        state.oom_killed = bool(st.get("OOMKilled"))
        if state.status == "running":
            stats = await container.stats(stream=False)
            usage = (stats[0] if isinstance(stats, list) else stats).get("memory_stats", {})
            if "usage" in usage:
                state.memory_usage_mb = round(usage["usage"] / (1 << 20), 1)
        return state

    async def ensure_container(self) -> None:
        """The container, running (made, started or unpaused as needed)."""
        container = await self._container()
        try:
            if container is None:
                container = await self.docker.containers.create(
                    self._config(), name=self.container_name
                )
                log.info("container created", name=self.container_name, image=self.image.tag)
            status = (await container.show())["State"]["Status"]
            if status == "paused":
                await container.unpause()
            elif status != "running":
                await container.start()
        except aiodocker.DockerError as exc:
            raise ClusterError(f"container {self.container_name}: {exc}") from exc

    async def _running(self) -> bool:
        container = await self._container()
        return container is not None and (await container.show())["State"]["Status"] in (
            "running",
            "paused",
        )

    async def pause(self) -> None:
        """Freeze every process of the server (the cgroup freezer)."""
        container = await self._require()
        await container.pause()

    async def unpause(self) -> None:
        container = await self._container()
        if container is not None and (await container.show())["State"]["Status"] == "paused":
            await container.unpause()

    async def kill(self) -> None:
        """Crash the server's machine: every process of the container dies at once."""
        container = await self._require()
        await container.kill(signal="SIGKILL")
        await container.wait()

    async def _require(self) -> aiodocker.containers.DockerContainer:
        container = await self._container()
        if container is None:
            raise ClusterError(f"container {self.container_name} does not exist")
        return container

    async def remove_container(self) -> None:
        """Remove the container (the cluster directory stays on the host)."""
        container = await self._container()
        if container is not None:
            await container.delete(force=True)

    # -- server tools run inside the container -------------------------------------------
    async def _run(self, *args: str, check: bool = True, as_service: bool = True) -> str:
        if not as_service:  # harness-side file work (snapshot copies) on the host
            return await super()._run(*args, check=check, as_service=False)
        if not await self._running():
            if check:
                raise ClusterError(f"{args[0]}: container {self.container_name} is not running")
            return f"container {self.container_name} is not running"
        container = await self._require()
        uid, gid = self._ids()
        execution = await container.exec(
            list(args),
            user=f"{uid}:{gid}",
            environment=dict(SERVER_ENVIRONMENT),
            workdir=str(self.root),
        )
        chunks: list[bytes] = []
        async with execution.start(detach=False) as stream:
            while (message := await stream.read_out()) is not None:
                chunks.append(message.data)
        code = (await execution.inspect()).get("ExitCode")
        out = b"".join(chunks).decode(errors="replace")
        if check and code != 0:
            raise ClusterError(f"{' '.join(args)} failed ({code}) in {self.container_name}: "
                               f"{out.strip()}")  # fmt: skip
        return out

    # -- lifecycle ------------------------------------------------------------------------
    async def is_running(self) -> bool:
        return await self._running() and await super().is_running()

    async def start(self) -> None:
        await self.ensure_container()
        await super().start()

    async def stop(self, mode: str = "fast") -> None:
        await self.unpause()  # a frozen server cannot stop
        if await self._running():
            await super().stop(mode)

    async def create_volume(self, name: str, size_mb: int) -> str:
        raise ClusterError(
            "tablespace volumes are not available on the docker backend yet (the container "
            "sees the cluster directory as it was mounted); run this scenario embedded"
        )

    def resume_stopped(self) -> None:
        super().resume_stopped()  # SIGCONT (a frozen container is unpaused by stop())

    async def drop_standby(self) -> None:
        standby = self.standby
        await super().drop_standby()
        if isinstance(standby, ContainerCluster):
            await standby.remove_container()

    async def dispose(self) -> None:
        """Stop the servers (standby first), remove their containers, close the daemon
        connection."""
        try:
            for cluster in (self.standby, self):
                if isinstance(cluster, ContainerCluster):
                    await cluster.stop()
                    await cluster.remove_container()
        finally:
            await self.docker.close()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "docker",
            "image": self.image.tag,
            "container": self.container_name,
            "resources": self.resources.model_dump(),
        }


async def server_version_of(docker: aiodocker.Docker, image: PostgresImage) -> str:
    """The version the image's ``postgres --version`` reports (e.g. ``15.14``)."""
    container = await docker.containers.run(
        {"Image": image.tag, "Entrypoint": [], "Cmd": [f"{image.bindir}/postgres", "--version"]}
    )
    try:
        await container.wait()
        out = "".join(await container.log(stdout=True, stderr=True))
    finally:
        await container.delete(force=True)
    words = out.split()
    return words[-1] if words else "unknown"


async def open_container_cluster(
    name: str,
    *,
    major: int = 15,
    resources: ServerResources | None = None,
    image: str | None = None,
    snapshot_group: str | None = None,
    home: Path | None = None,
    progress: Progress | None = None,
) -> ContainerCluster:
    """Open (initdb if new) the container cluster ``name``, building its image when missing;
    not started. :meth:`ContainerCluster.dispose` removes its containers and closes the daemon
    connection (the cluster directory and snapshots stay)."""
    base = home or dbaops_home()
    docker = await open_docker()
    try:
        say = progress or (lambda line: log.debug("image", line=line))
        img = await ensure_postgres_image(docker, major, base / "images", say, image)
        version = await server_version_of(docker, img)
        bins = PgBinaries(
            bindir=Path(img.bindir), version=version, major=major, source=f"docker:{img.tag}"
        )
        os_user = ensure_service_user() if running_as_root() else None
        root, snapshots = cluster_paths(name, base, f"pg{major}-docker", snapshot_group, os_user)
        cluster = ContainerCluster(
            root,
            bins,
            os_user,
            snapshots,
            docker=docker,
            image=img,
            resources=resources or ServerResources(),
        )
    except BaseException:
        await docker.close()
        raise
    try:
        if not (cluster.datadir / "PG_VERSION").exists():
            await cluster.ensure_container()
            await cluster._initdb({})
    except BaseException:
        with anyio.CancelScope(shield=True):
            await cluster.dispose()
        raise
    return cluster
