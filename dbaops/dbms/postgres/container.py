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

A standby (the replica profile) runs in a second container on a bridge network its primary
makes, so a partition between them is real; a scenario can put the data directory on a volume
of its own (``resources.disk_mb``) that fills for real.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import pwd
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import aiodocker
import anyio
import structlog
from pydantic import BaseModel

from dbaops.containers.daemon import docker_client, open_docker
from dbaops.containers.images import PostgresImage, Progress, ensure_postgres_image
from dbaops.containers.machine import PartitionMode
from dbaops.containers.resources import ServerResources
from dbaops.dbms.osuser import chown_tree, ensure_service_user, running_as_root
from dbaops.dbms.postgres.binaries import PgBinaries
from dbaops.dbms.postgres.cluster import ClusterError, PostgresCluster
from dbaops.dbms.serverdir import SERVER_ENVIRONMENT, cluster_paths, dbaops_home

log = structlog.get_logger(__name__)

#: The volume the data directory lives on when a scenario gives it a size (resources.disk_mb).
DATA_VOLUME = "pgdata"

#: The addresses of replication networks; the servers of a docker cluster trust them (the
#: standby's replication connection, and the harness reaching the standby from the gateway).
REPLICATION_RANGE = "172.30.0.0/16"

#: Labels on every container dbaops makes (``dbaops clean`` and the tests find them by it).
CONTAINER_LABEL = "dbaops.cluster"


class MachineStatus(BaseModel):
    """The container a server runs in, as ``manage_instance status`` shows it: what a managed
    service's console shows of an instance's machine."""

    status: str  # running | paused | exited | missing
    exit_code: int | None = None
    oom_killed: bool = False
    oom_kills: int | None = None  # kernel OOM kills in the container since it started
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    memory_usage_mb: float | None = None

    def summary(self) -> str:
        """One line for an operator."""
        parts = [f"instance container: {self.status}"]
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.oom_killed or self.oom_kills:
            parts.append(f"out-of-memory kills: {self.oom_kills or 1}")
        cpus = "unlimited" if self.cpu_limit is None else f"{self.cpu_limit:g}"
        parts.append(f"CPU limit {cpus}")
        limit = "unlimited" if self.memory_limit_mb is None else f"{self.memory_limit_mb} MiB"
        used = "" if self.memory_usage_mb is None else f"{self.memory_usage_mb:.0f} MiB of "
        parts.append(f"memory {used}{limit}")
        return "; ".join(parts)


class ContainerCluster(PostgresCluster):
    """An embedded cluster whose server runs in its own container.

    The container lives as long as the server: a start creates it (with the mounts and limits
    of that moment: a tablespace volume made since is in it), a stop removes it, a crash leaves
    it exited until the next start replaces it."""

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
        primary: ContainerCluster | None = None,
    ) -> None:
        self.docker = docker
        self.image = image
        self.resources = resources
        #: CPUs a fault set on the running container (kept across restarts, like a resized
        #: instance); None: the scenario's limit.
        self.cpus_override: float | None = None
        #: A standby's primary (None: this is a primary). A standby runs on the replication
        #: network its primary made, so a partition between them is real.
        self.primary = primary
        self.container_name = f"dbaops-{root.parent.name if primary else root.name}"
        if primary is not None:
            self.container_name += "-standby"
        self.partitioned: PartitionMode | None = None
        self._making_standby = False
        super().__init__(root, binaries, os_user, snapshot_root)
        if primary is not None:
            self.host = primary.replication_net().standby_ip

    def _standby_at(self, root: Path) -> PostgresCluster:
        return ContainerCluster(
            root,
            self.binaries,
            self.os_user,
            docker=self.docker,
            image=self.image,
            resources=self.resources,
            primary=self,
        )

    backend: ClassVar[str] = "docker"
    private_view: ClassVar[bool] = False  # the container is its filesystem

    @property
    def machine(self) -> ContainerCluster:
        return self

    @property
    def role(self) -> str:
        return "standby" if self.primary is not None else "primary"

    @property
    def cpus(self) -> float | None:
        """The CPU limit in force."""
        return self.cpus_override if self.cpus_override is not None else self.resources.cpus

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
            "NetworkMode": "host" if self.primary is None else self.primary.replication_net().name,
            "PidMode": "host",
            # Recursive: the loop-mounted volumes under the cluster directory come along.
            "Binds": [f"{self.root}:{self.root}"],
            "ShmSize": self.resources.shm_mb << 20,
        }
        if self.cpus is not None:
            host["NanoCpus"] = int(self.cpus * 1e9)
        if self.resources.memory_mb is not None:
            host["Memory"] = self.resources.memory_mb << 20
            host["MemorySwap"] = self.resources.memory_mb << 20  # no swap
        config: dict[str, Any] = {
            "Image": self.image.tag,
            "Entrypoint": [],
            "Cmd": ["sh", "-c", init],
            "Labels": {CONTAINER_LABEL: str(self.root), "dbaops.role": self.role},
            "HostConfig": host,
        }
        if self.primary is not None:
            net = self.primary.replication_net()
            config["NetworkingConfig"] = {"EndpointsConfig": {net.name: net.endpoint()}}
        return config

    # -- the replication network (primary + standby) ---------------------------------------
    def replication_net(self) -> ReplicationNet:
        """The bridge network a standby of this primary runs on (fixed addresses: the host,
        where the primary listens, is the gateway)."""
        return ReplicationNet.of(self.root)

    async def ensure_replication_net(self) -> ReplicationNet:
        """Create the replication network if it is missing (a subnet in use elsewhere is
        an error that names it)."""
        net = self.replication_net()
        try:
            await self.docker.networks.get(net.name)
            return net
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                raise ClusterError(f"network {net.name}: {exc}") from exc
        try:
            await self.docker.networks.create(net.create_config(str(self.root)))
        except aiodocker.DockerError as exc:
            raise ClusterError(
                f"could not create the replication network {net.name} ({net.subnet}): {exc}"
            ) from exc
        return net

    async def remove_replication_net(self) -> None:
        net = self.replication_net()
        try:
            await (await self.docker.networks.get(net.name)).delete()
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                raise ClusterError(f"network {net.name}: {exc}") from exc

    # -- the data directory on a volume of its own (resources.disk_mb) --------------------
    def _data_on_volume(self) -> bool:
        return self.primary is None and self.resources.disk_mb is not None

    @property
    def datadir(self) -> Path:
        if self._data_on_volume():
            return self.volumes.location(DATA_VOLUME) / "pgdata"
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        if self._data_on_volume():  # off the volume: a full disk must not silence the log
            return self.root / "log" / "postgresql.log"
        return super().log_path

    @property
    def wal_dir(self) -> Path | None:
        return self.root / "wal" if self._data_on_volume() else None

    async def _initdb(self, settings: dict[str, str]) -> None:
        if self._data_on_volume():
            assert self.resources.disk_mb is not None
            if DATA_VOLUME in self.volumes.names():
                await self._on_volumes(self.volumes.mount_all)
            else:
                size = self.resources.disk_mb
                await self._on_volumes(lambda: self.volumes.create(DATA_VOLUME, size))
            shutil.rmtree(self.root / "wal", ignore_errors=True)  # initdb --waldir makes it
            (self.root / "log").mkdir(exist_ok=True)
            if self.os_user:
                chown_tree(self.root / "log", self.os_user)
            settings = {**settings, "log_directory": f"'{self.root / 'log'}'"}
        await self.ensure_container()  # initdb runs in it (made after the volume's mount)
        await super()._initdb(settings)
        with (self.datadir / "pg_hba.conf").open("a") as fh:
            fh.write(
                "# --- dbaops: the replication network (a standby, and the harness reaching "
                "it) ---\n"
                f"host all all {REPLICATION_RANGE} trust\n"
                f"host replication all {REPLICATION_RANGE} trust\n"
            )

    def _serves_standby(self) -> bool:
        return self.standby is not None or self._making_standby

    def _server_options(self) -> str:
        options = super()._server_options()
        if self.primary is not None:  # its own network namespace: every address is its own
            return f"{options} -h 0.0.0.0"
        if self._serves_standby():  # the standby reaches the primary through the gateway
            return f"{options} -h 127.0.0.1,{self.replication_net().gateway}"
        return options

    def _aim_at_primary(self) -> None:
        """A standby's ``primary_conninfo`` names its primary on the replication network."""
        assert self.primary is not None
        auto = self.datadir / "postgresql.auto.conf"
        if not auto.exists():
            return
        net, port = self.primary.replication_net(), self.primary.port
        text = re.sub(r"(primary_conninfo = '[^\n]*?)host=[^ ']+", rf"\g<1>host={net.gateway}",
                      auto.read_text())  # fmt: skip
        text = re.sub(r"(primary_conninfo = '[^\n]*?)port=\d+", rf"\g<1>port={port}", text)
        auto.write_text(text)

    async def partition(self, mode: PartitionMode) -> None:
        """Cut this standby off its primary: ``drop`` loses the replication traffic in the
        standby's network namespace (both sides wait for their timeouts; the harness still
        reaches the standby), ``disconnect`` takes its network link away."""
        if self.primary is None:
            raise ClusterError("a partition cuts a standby off its primary: this is the primary")
        await self._link(mode, cut=True)
        self.partitioned = mode

    async def heal(self) -> None:
        if self.partitioned is not None and await self._running():
            await self._link(self.partitioned, cut=False)
        self.partitioned = None  # (a container made later starts whole)

    async def _link(self, mode: PartitionMode, *, cut: bool) -> None:
        """Cut (or restore) the running container's link to its primary: a partition, or one
        that a new container of this standby inherits."""
        assert self.primary is not None
        net = self.primary.replication_net()
        if mode == "drop":
            await self._iptables("-A" if cut else "-D", net.gateway, self.primary.port)
            return
        network = await self.docker.networks.get(net.name)
        if cut:
            await network.disconnect({"Container": self.container_name, "Force": True})
        else:
            await network.connect({"Container": self.container_name,
                                   "EndpointConfig": net.endpoint()})  # fmt: skip

    async def _iptables(self, action: str, peer: str, port: int) -> None:
        """Add (-A) or delete (-D) the rules that drop traffic between this container and
        ``peer``:``port``, inside the container's own network namespace."""
        state = await self._state()
        pid = state.get("Pid") if state else None
        if not pid:
            raise ClusterError("the standby's container is not running")
        enter = ["nsenter", "-t", str(pid), "-n", "iptables", "-w"]
        rules = [
            ["OUTPUT", "-d", peer, "-p", "tcp", "--dport", str(port), "-j", "DROP"],
            ["INPUT", "-s", peer, "-p", "tcp", "--sport", str(port), "-j", "DROP"],
        ]
        for rule in rules:
            await super()._run(*enter, action, *rule, as_service=False)

    async def _container(self) -> aiodocker.containers.DockerContainer | None:
        try:
            return await self.docker.containers.get(self.container_name)
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise ClusterError(f"container {self.container_name}: {exc}") from exc

    async def _state(self) -> dict[str, Any] | None:
        container = await self._container()
        if container is None:
            return None
        return dict((await container.show())["State"])

    async def machine_status(self) -> MachineStatus:
        """The container's state and resource use (``missing`` when there is none)."""
        container = await self._container()
        status = MachineStatus(
            status="missing", cpu_limit=self.cpus, memory_limit_mb=self.resources.memory_mb
        )
        if container is None:
            return status
        info = await container.show()
        st = info["State"]
        status.status = str(st.get("Status", "unknown"))
        status.exit_code = st.get("ExitCode") if status.status == "exited" else None
        status.oom_killed = bool(st.get("OOMKilled"))
        status.oom_kills = _oom_kills(str(info.get("Id", "")))
        if status.status == "running":
            stats = await container.stats(stream=False)
            memory = (stats[0] if isinstance(stats, list) else stats).get("memory_stats", {})
            if "usage" in memory:
                status.memory_usage_mb = round(memory["usage"] / (1 << 20), 1)
        return status

    async def machine_summary(self) -> str:
        return (await self.machine_status()).summary()

    async def ensure_container(self) -> bool:
        """The container, running: made (an exited one is replaced) or unpaused as needed.
        Returns True when it was made now (no server can be running in it)."""
        container = await self._container()
        try:
            if container is not None:
                status = (await container.show())["State"]["Status"]
                if status == "running":
                    return False
                if status == "paused":
                    await container.unpause()
                    return False
                await container.delete(force=True)
            container = await self.docker.containers.create(
                self._config(), name=self.container_name
            )
            await container.start()
            log.info("container started", name=self.container_name, image=self.image.tag)
            return True
        except aiodocker.DockerError as exc:
            raise ClusterError(f"container {self.container_name}: {exc}") from exc

    async def _running(self) -> bool:
        state = await self._state()
        return state is not None and state.get("Status") in ("running", "paused")

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

    # -- faults only a machine suffers (harness only) -------------------------------------
    async def freeze(self) -> None:
        """Freeze every process of the server (the cgroup freezer: ``docker pause``)."""
        await (await self._require()).pause()

    async def thaw(self) -> None:
        state = await self._state()
        if state is not None and state.get("Status") == "paused":
            await (await self._require()).unpause()

    async def crash(self) -> None:
        """Crash the server's machine: every process of the container dies at once (SIGKILL);
        the container stays exited until the next start, which runs crash recovery."""
        container = await self._require()
        await self.thaw()
        await container.kill(signal="SIGKILL")
        await container.wait()

    async def limit_cpus(self, cpus: float | None) -> None:
        """Change the running container's CPU limit (None: the scenario's); it holds across
        restarts for the rest of the run."""
        self.cpus_override = cpus
        container = await self._container()
        if container is not None and await self._running():
            nano = int(self.cpus * 1e9) if self.cpus is not None else 0
            await self.docker._query_json(
                f"containers/{container.id}/update", method="POST", data={"NanoCpus": nano}
            )

    # -- server tools run inside the container -------------------------------------------
    async def _run(
        self, *args: str, check: bool = True, as_service: bool = True, scrubbed: bool = False
    ) -> str:
        if not as_service:  # harness-side file work (snapshot copies) on the host
            return await super()._run(*args, check=check, as_service=False, scrubbed=scrubbed)
        container = await self._container()
        running = container is not None and (await container.show())["State"]["Status"] == "running"
        if container is None or not running:
            if check:
                raise ClusterError(f"{args[0]}: the server's container is not running")
            return "the server's container is not running"
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
            raise ClusterError(f"{' '.join(args)} failed ({code}) in the server's container: "
                               f"{out.strip()}")  # fmt: skip
        return out

    # -- lifecycle ------------------------------------------------------------------------
    async def is_running(self) -> bool:
        """The postmaster is alive in a running (or frozen) container; no exec, so a frozen
        container answers too."""
        if not await self._running():
            return False
        pid = self._postmaster_pid()
        return pid is not None and _process_alive(pid)

    async def start(self) -> None:
        if await self.is_running():
            await self.stop()
        if self.volumes.names():  # mounted before the container is made, so it has them
            await self._on_volumes(self.volumes.mount_all)
        if self.primary is not None:
            await self.primary.ensure_replication_net()
            self._aim_at_primary()
        elif self._serves_standby():
            await self.ensure_replication_net()
        if await self.ensure_container():
            # A new machine: a postmaster.pid left by a crash names no live server, and with
            # the host's pid namespace its pid may be another process's by now.
            (self.datadir / "postmaster.pid").unlink(missing_ok=True)
            if self.partitioned is not None:  # the partition is the network's: it stays
                await self._link(self.partitioned, cut=True)
        await super().start()

    async def stop(self, mode: str = "fast") -> None:
        await self.thaw()  # a frozen server cannot stop
        if await self._running():
            await super().stop(mode)
        await self.remove_container()

    async def create_volume(self, name: str, size_mb: int) -> str:
        location = await super().create_volume(name, size_mb)
        if await self.is_running():
            await self.restart()  # a new container, which has the new mount
        return location

    async def create_standby(
        self, application_name: str, settings: dict[str, str], slot: str | None = None
    ) -> PostgresCluster:
        if self.primary is not None:
            raise ClusterError("a standby of a standby is not supported")
        if self._data_on_volume():
            raise ClusterError("a standby of a server whose data has its own volume (disk_mb) "
                               "is not supported")  # fmt: skip
        self._making_standby = True  # listen on the replication network before it streams
        try:
            await self.restart()
            return await super().create_standby(application_name, settings, slot)
        finally:
            self._making_standby = False

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
            if self.primary is None:
                await self.remove_replication_net()
        finally:
            if self.primary is None:
                await self.docker.close()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "docker",
            "image": self.image.tag,
            "image_built_from": "a registry" if self.image.from_registry else "debian packages",
            "image_version": self.image.version,
            "container": self.container_name,
            "resources": self.resources.model_dump(),
        }


class ReplicationNet(BaseModel):
    """The bridge network of one cluster's primary and standby: a /24 of 172.30.0.0/16 named
    by the cluster directory, with the host (where the primary listens) as its gateway and
    the standby at .2, so addresses survive restarts of either server."""

    name: str
    subnet: str
    gateway: str
    standby_ip: str

    @classmethod
    def of(cls, root: Path) -> ReplicationNet:
        subnets = list(ipaddress.IPv4Network(REPLICATION_RANGE).subnets(new_prefix=24))
        subnet = subnets[int(hashlib.sha256(str(root).encode()).hexdigest(), 16) % len(subnets)]
        return cls(
            name=f"dbaops-{root.name}",
            subnet=str(subnet),
            gateway=str(subnet[1]),
            standby_ip=str(subnet[2]),
        )

    def create_config(self, label: str) -> dict[str, Any]:
        return {
            "Name": self.name,
            "Driver": "bridge",
            "CheckDuplicate": True,
            "IPAM": {"Config": [{"Subnet": self.subnet, "Gateway": self.gateway}]},
            "Labels": {CONTAINER_LABEL: label},
        }

    def endpoint(self) -> dict[str, Any]:
        return {"IPAMConfig": {"IPv4Address": self.standby_ip}}


def _process_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _oom_kills(container_id: str) -> int | None:
    """The kernel's OOM kill count of the container's memory cgroup (cgroup v1 or v2)."""
    for path in (
        Path(f"/sys/fs/cgroup/memory/docker/{container_id}/memory.oom_control"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.events"),
        Path(f"/sys/fs/cgroup/docker/{container_id}/memory.events"),
    ):
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


async def labelled(
    docker: aiodocker.Docker, match: Callable[[str], bool]
) -> tuple[list[str], list[str]]:
    """The names of dbaops' containers and of its networks whose cluster directory (their
    label) ``match`` accepts."""
    containers = [
        str(c["Names"][0]).lstrip("/")
        for c in await docker.containers.list(all=True)
        if match(str(c["Labels"].get(CONTAINER_LABEL, "")))
    ]
    networks = [
        str(n["Name"])
        for n in await docker.networks.list()
        if match(str((n.get("Labels") or {}).get(CONTAINER_LABEL, "")))
    ]
    return containers, networks


async def remove_labelled(match: Callable[[str], bool]) -> list[str]:
    """Remove dbaops' containers, then its networks, whose cluster directory ``match``
    accepts (``dbaops clean``, a test session's end); returns their names."""
    async with docker_client() as docker:
        containers, networks = await labelled(docker, match)
        for name in containers:
            await (await docker.containers.get(name)).delete(force=True)
        for name in networks:
            await (await docker.networks.get(name)).delete()
    return [*containers, *networks]


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
        bins = PgBinaries(
            bindir=Path(img.bindir), version=img.version, major=major, source=f"docker:{img.tag}"
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
        if cluster.volumes.names():  # the data directory may be on one of them
            await cluster._on_volumes(cluster.volumes.mount_all)
        if not (cluster.datadir / "PG_VERSION").exists():
            await cluster._initdb({})
            await cluster.remove_container()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await cluster.dispose()
        raise
    return cluster
