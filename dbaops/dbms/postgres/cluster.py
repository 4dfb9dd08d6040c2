"""An embedded PostgreSQL cluster owned by dbaops: initdb, start/stop, snapshots, log file.

The cluster lives in its own directory (data, socket dir, WAL archive, snapshots), listens on a
free loopback port, and works when dbaops runs as root (the server runs as a service user).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, TypeVar

import anyio
import asyncpg
import structlog

from dbaops.containers.machine import ServerMachine
from dbaops.dbms.errors import InstanceError
from dbaops.dbms.osuser import (
    as_user,
    chown_tree,
    ensure_service_user,
    make_accessible_copy,
    readable_by_others,
    running_as_root,
)
from dbaops.dbms.postgres.binaries import PgBinaries, find_binaries
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.harness_role import HARNESS_ROLE
from dbaops.dbms.postgres.passwords import role_password, scram_verifier
from dbaops.dbms.postgres.role_guard import PRELOADED, guard_options, install_guard, needs_guard
from dbaops.dbms.postgres.volumes import LoopVolumes, VolumeError
from dbaops.dbms.private_view import (
    harness_places,
    mount_inside,
    private_view_command,
    private_views_work,
    remove_stage,
    shares_host_view,
)
from dbaops.dbms.serverdir import (
    SERVER_ENVIRONMENT,
    ServerDirectory,
    cluster_paths,
    dbaops_home,
    free_port,
    home_key,
    port_is_free,
)

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: Server settings of the shared fixture (design notes §2); scenarios may add or override.
FIXTURE_SETTINGS: dict[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "120",
    "shared_buffers": "'256MB'",
    "max_prepared_transactions": "10",
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "shared_preload_libraries": f"'{','.join(PRELOADED)}'",
    "pg_stat_statements.track": "all",
    "logging_collector": "on",
    "log_directory": "'log'",
    "log_filename": "'postgresql.log'",
    "log_rotation_age": "0",
    "log_rotation_size": "0",
    "log_line_prefix": "'%m [%p] %u@%d %a '",
    "log_timezone": "'UTC'",
    "log_lock_waits": "on",
    "log_checkpoints": "on",
    "log_autovacuum_min_duration": "0",
    "track_io_timing": "on",
    "autovacuum_naptime": "'5s'",
    "max_wal_size": "'1GB'",
    "archive_mode": "on",
}


#: The role a standby replicates as.
REPLICATION_ROLE = "replicator"


class ClusterError(InstanceError):
    """The embedded cluster could not be created, started or restored."""


def role_secret(home: Path) -> str:
    """The secret the passwords of every role of this home's servers derive from
    (:mod:`dbaops.dbms.postgres.passwords`)."""
    return hmac.new(home_key(home), b"role passwords", hashlib.sha256).hexdigest()


class PostgresCluster(ServerDirectory):
    """One embedded cluster directory with its server process."""

    #: Where the server runs (the run header's ``backend.kind``).
    backend: ClassVar[str] = "embedded"
    #: Whether the server, a process of this host, gets a private view of its filesystem
    #: (:mod:`dbaops.dbms.private_view`); a container has its own filesystem.
    private_view: ClassVar[bool] = True
    busy_error: ClassVar[type[Exception]] = ClusterError

    def __init__(
        self,
        root: Path,
        binaries: PgBinaries,
        os_user: str | None,
        snapshot_root: Path | None = None,
    ) -> None:
        self._lock_fd: int | None = None
        self.root = root
        self._snapshot_root = snapshot_root or root / "snapshots"
        self.binaries = binaries
        self.os_user = os_user
        self.port = free_port()
        self.host = "127.0.0.1"
        self.standby: PostgresCluster | None = None
        #: RLIMIT_FSIZE the postmaster starts under (an OS-level fault): no file it writes may
        #: grow past it ("could not extend file ... File too large"); None: unlimited.
        self.file_size_limit_bytes: int | None = None
        #: Small loop-mounted filesystems (an OS-level fault: tablespaces that fill up).
        self.volumes = LoopVolumes(root / "volumes", os_user)
        standby_root = root / "standby"
        if (standby_root / "data" / "PG_VERSION").exists():
            self.standby = self._standby_at(standby_root)

    def _standby_at(self, root: Path) -> PostgresCluster:
        """The standby cluster kept in ``root`` (same binaries and OS user)."""
        return PostgresCluster(root, self.binaries, self.os_user)

    @functools.cached_property
    def secret(self) -> str:
        """What the passwords of this server's roles derive from: its dbaops home's
        (the nearest directory above it with the home's key; a standby shares its primary's)."""
        for parent in self.root.parents:
            if (parent / ".cluster-key").exists():
                return role_secret(parent)
        raise ClusterError(f"{self.root} is in no dbaops home (no .cluster-key above it)")

    def password(self, role: str) -> str:
        """``role``'s password on this server."""
        return role_password(self.secret, role)

    def endpoint(self, database: str = "postgres", **fields: object) -> Endpoint:
        """This server's address, with what its roles' passwords derive from."""
        return Endpoint.model_validate(
            {"host": self.host, "port": self.port, "database": database,
             "role_secret": self.secret, **fields}
        )  # fmt: skip

    # -- layout ---------------------------------------------------------------------------
    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def archive_dir(self) -> Path:
        return self.root / "archive"

    @property
    def snapshot_root(self) -> Path:
        """Where the dirty snapshots live: shared by every cluster of one snapshot group (the
        campaign workers of one scenario), read-only while a run restores from them."""
        return self._snapshot_root

    @property
    def log_path(self) -> Path:
        """The server log file written by the logging collector."""
        return self.datadir / "log" / "postgresql.log"

    # -- creation ---------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        name: str,
        *,
        home: Path | None = None,
        binaries: PgBinaries | None = None,
        settings: dict[str, str] | None = None,
        snapshot_group: str | None = None,
    ) -> PostgresCluster:
        """Open (initdb if new) the cluster ``name`` under ``home``; it is not started. Its
        snapshots are those of ``snapshot_group`` (default: its own name), shared with every
        cluster of the group."""
        bins = binaries or find_binaries()
        os_user: str | None = None
        base = home or dbaops_home()
        if running_as_root():
            os_user = ensure_service_user()
            if not readable_by_others(bins.bindir):
                dest = base / "pg" / f"{bins.source}-{bins.version}"
                bins = bins.model_copy(update={"bindir": make_accessible_copy(bins.bindir, dest)})
            if not readable_by_others(base.parent if base.exists() else base.parent):
                raise ClusterError(
                    f"{base} is not reachable by the service user {os_user}: set DBAOPS_HOME "
                    "to a directory whose parents are world-traversable"
                )
        root, snapshots = cluster_paths(name, base, f"pg{bins.major}", snapshot_group, os_user)
        cluster = cls(root, bins, os_user, snapshots)
        if not (cluster.datadir / "PG_VERSION").exists():
            await cluster._initdb(settings or {})
        return cluster

    async def _run(
        self, *args: str, check: bool = True, as_service: bool = True, scrubbed: bool = False
    ) -> str:
        # A worker thread rather than the event loop's subprocess support: uvloop does not
        # accept ``user=``, and the server must run as the service user when we are root.
        # Server tools get a scrubbed environment: the postmaster inherits pg_ctl's, and an
        # agent must not find the harness's variables (API keys...) in it.
        def run() -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(
                list(args),
                capture_output=True,
                check=False,
                **as_user(self.os_user if as_service else None),
                start_new_session=True,
                cwd=str(self.root),
                env=dict(SERVER_ENVIRONMENT) if as_service or scrubbed else None,
            )

        result = await anyio.to_thread.run_sync(run)
        out = (result.stdout or b"").decode() + (result.stderr or b"").decode()
        if check and result.returncode != 0:
            raise ClusterError(f"{' '.join(args)} failed ({result.returncode}): {out.strip()}")
        return out

    @property
    def wal_dir(self) -> Path | None:
        """WAL kept apart from the data directory (initdb --waldir; snapshots carry it), or
        None: in it."""
        return None

    def _data_on_volume(self) -> bool:
        """The data directory lives on one of the cluster's volumes (whose image a snapshot
        carries, so its copy of the data directory is not needed)."""
        return False

    async def _initdb(self, settings: dict[str, str]) -> None:
        t0 = time.monotonic()
        if self.datadir.exists():
            shutil.rmtree(self.datadir)
        for d in (self.socket_dir, self.archive_dir, self.snapshot_root):
            d.mkdir(parents=True, exist_ok=True)
        if self.os_user:
            chown_tree(self.root, self.os_user)
        self._seal_snapshots()
        # The superuser's password reaches initdb in a file only the server's user reads,
        # removed as soon as initdb is done (no server runs yet).
        pwfile = self.root / ".initdb-password"
        pwfile.write_text(self.password("postgres") + "\n")
        os.chmod(pwfile, 0o600)
        if self.os_user:
            entry = pwd.getpwnam(self.os_user)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        try:
            await self._run(
                self.binaries.tool("initdb"),
                "-D",
                str(self.datadir),
                "-U",
                "postgres",
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
                "--locale-provider=libc",
                "--locale=C.UTF-8",
                "--no-sync",
                *(["--waldir", str(self.wal_dir)] if self.wal_dir else []),
            )
        finally:
            pwfile.unlink(missing_ok=True)
        conf = dict(FIXTURE_SETTINGS)
        conf["unix_socket_directories"] = f"'{self.socket_dir}'"
        conf["archive_command"] = (
            f"'test ! -f {self.archive_dir}/%f && cp %p {self.archive_dir}/%f'"
        )
        conf.update(settings)
        lines = ["", "# --- dbaops fixture settings ---"]
        lines += [f"{k} = {v}" for k, v in conf.items()]
        with (self.datadir / "postgresql.conf").open("a") as fh:
            fh.write("\n".join(lines) + "\n")
        log.info("initdb", datadir=str(self.datadir), seconds=round(time.monotonic() - t0, 3))

    # -- process control ------------------------------------------------------------------
    async def is_running(self) -> bool:
        out = await self._run(
            self.binaries.tool("pg_ctl"), "-D", str(self.datadir), "status", check=False
        )
        return "server is running" in out

    async def start(self) -> None:
        if await self.is_running():
            await self.stop()
        # Keep the port across restarts so endpoints held by a run stay valid.
        if not port_is_free(self.port):
            self.port = free_port()
        if self.volumes.names():  # a tablespace's volume must be there before the server is
            await self._on_volumes(self.volumes.mount_all)
        limit = self.file_size_limit_bytes
        under_limit = ["prlimit", f"--fsize={limit}:{limit}", "--"] if limit is not None else []
        command = [
            *under_limit,
            self.binaries.tool("pg_ctl"),
            "-D",
            str(self.datadir),
            "-w",
            "-t",
            "120",
            "-l",
            str(self.root / "startup.log"),
            "-o",
            self._server_options(),
            "start",
        ]
        if self.os_user is None or not self.private_view or not private_views_work():
            await self._run(*command)
            return
        # Root starts the namespace; the server runs as its OS user inside it.
        places = [*harness_places(dbaops_home()), self.root.parents[1]]  # (its own home)
        wrapped = private_view_command(command, self.os_user, self._server_needs(), places)
        try:
            await self._run(*wrapped, as_service=False, scrubbed=True)
        finally:
            remove_stage(wrapped)

    def _server_needs(self) -> list[Path]:
        """What the server sees of the harness's filesystem: its cluster directory and its
        binaries (a copy dbaops made is kept whole: its libraries sit beside the install)."""
        install = self.binaries.bindir.parent
        for parent in self.binaries.bindir.parents:
            if (parent / ".complete").exists():  # make_accessible_copy's marker
                install = parent
                break
        return [self.root, install]

    def _server_options(self) -> str:
        """The postmaster's command-line options: its port and socket directory and, on a
        major whose CREATEROLE can grant any role, the role guard
        (:mod:`dbaops.dbms.postgres.role_guard`)."""
        options = f"-p {self.port} -k {self.socket_dir}"
        if needs_guard(self.binaries.major):
            library = install_guard(self.binaries, self.root / "lib")
            options += " " + guard_options(library, [HARNESS_ROLE])
        return options

    async def _on_volumes(self, action: Callable[[], T]) -> T:
        """Run a (blocking) volume operation in a worker thread; its failures are cluster ones."""
        try:
            return await anyio.to_thread.run_sync(action)
        except VolumeError as exc:
            raise ClusterError(str(exc)) from exc

    async def create_volume(self, name: str, size_mb: int) -> str:
        """A small filesystem of its own, mounted (root only); returns a directory on it the
        server's OS user owns, for ``CREATE TABLESPACE … LOCATION``."""
        if self.standby is not None:
            raise ClusterError(
                "a tablespace volume on a server with a standby is not supported: on one host "
                "both servers would use the tablespace's location"
            )
        location = await self._on_volumes(lambda: self.volumes.create(name, size_mb))
        postmaster = self._postmaster_pid()
        if self.private_view and postmaster is not None and not shares_host_view(postmaster):
            # The running server's private view was made before this mount: add it there.
            point = self.volumes.mount_point(name)
            device = self.volumes.device(name)
            await anyio.to_thread.run_sync(
                lambda: mount_inside(postmaster, device, point, "nodev,nosuid")
            )
        return str(location)

    async def unmount_volumes(self) -> None:
        """Unmount the volumes (the server must be stopped): a finished run leaves no mounts."""
        await self._on_volumes(self.volumes.unmount_all)

    def limit_file_size(self, limit_bytes: int | None) -> None:
        """Start the server under this file-size limit from its next (re)start on."""
        self.file_size_limit_bytes = limit_bytes

    async def stop(self, mode: str = "fast") -> None:
        if not (self.datadir / "postmaster.pid").exists():
            return
        await self._run(
            self.binaries.tool("pg_ctl"),
            "-D",
            str(self.datadir),
            "-w",
            "-t",
            "120",
            "-m",
            mode,
            "stop",
            check=False,
        )

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    # -- a streaming standby -----------------------------------------------------------------
    async def create_standby(
        self, application_name: str, settings: dict[str, str], slot: str | None = None
    ) -> PostgresCluster:
        """A hot standby of this (running) server, made with ``pg_basebackup -R`` into
        ``<root>/standby`` with its own port, socket directory and log, and started."""
        if self.volumes.names():
            raise ClusterError(
                "a standby of a server with a tablespace volume is not supported: on one host "
                "both servers would use the tablespace's location"
            )
        if self.standby is not None:
            await self.standby.stop(mode="immediate")
        root = self.root / "standby"
        if root.exists():
            shutil.rmtree(root)
        for d in (root, root / "sock"):
            d.mkdir(parents=True, exist_ok=True)
        if self.os_user:
            chown_tree(root, self.os_user)
        await self._ensure_replication_role()
        args = [
            self.binaries.tool("pg_basebackup"),
            "-D", str(root / "data"),
            "-d", f"host={self.host} port={self.port} user={REPLICATION_ROLE} "
                  f"password={self.password(REPLICATION_ROLE)} "
                  f"application_name={application_name}",
            "-R", "-X", "stream", "--no-sync", "--checkpoint=fast",
        ]  # fmt: skip
        if slot is not None:
            args += ["-S", slot, "-C"]
        await self._run(*args)
        standby = self._standby_at(root)
        conf = {"unix_socket_directories": f"'{standby.socket_dir}'", **settings}
        with (standby.datadir / "postgresql.conf").open("a") as fh:
            fh.write("\n# --- dbaops standby settings ---\n")
            fh.write("".join(f"{k} = {v}\n" for k, v in conf.items()))
        self.standby = standby
        await standby.start()
        return standby

    async def _ensure_replication_role(self) -> None:
        """The role a standby streams as (REPLICATION only: its password sits in the
        standby's ``primary_conninfo``, which the server's user can read, so it must not be
        the superuser's)."""
        conn = await self.connect()
        try:
            exists = await conn.fetchval(
                "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1", REPLICATION_ROLE
            )
            verb = "ALTER" if exists else "CREATE"
            verifier = scram_verifier(self.password(REPLICATION_ROLE))
            await conn.execute(
                f"{verb} ROLE {REPLICATION_ROLE} REPLICATION LOGIN PASSWORD '{verifier}'"
            )
        finally:
            await conn.close()

    def _point_standby_here(self) -> None:
        """The standby's ``primary_conninfo`` names the primary's port of the run that made it;
        a later run's primary may listen elsewhere."""
        assert self.standby is not None
        auto = self.standby.datadir / "postgresql.auto.conf"
        text = re.sub(r"(primary_conninfo = '[^\n]*?)port=\d+", rf"\g<1>port={self.port}",
                      auto.read_text())  # fmt: skip
        auto.write_text(text)

    async def reinitialize(self) -> None:
        """A pristine, running cluster: a preparation starts from initdb, never from the data
        directory a previous run left (its ALTER SYSTEM settings, file edits, slots, roles)."""
        await self.stop(mode="immediate")
        await self.drop_standby()
        self.file_size_limit_bytes = None
        self._clear_archive()
        await self._on_volumes(self.volumes.remove_all)
        await self._initdb({})
        await self.start()

    def resume_stopped(self) -> None:
        """SIGCONT every process of this server (and its standby): a process a fault froze
        with SIGSTOP must not hold up the harness's shutdown."""
        for cluster in (self, self.standby):
            if cluster is None:
                continue
            for pid in cluster._server_processes():
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass

    def _server_processes(self) -> list[int]:
        """The postmaster and its children (empty when the server is not running)."""
        postmaster = self._postmaster_pid()
        if postmaster is None:
            return []
        children = [
            int(stat.parent.name)
            for stat in Path("/proc").glob("[0-9]*/stat")
            if _parent_pid(stat) == postmaster
        ]
        return [postmaster, *children]

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.datadir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def describe(self) -> dict[str, object]:
        """What the run header records about where the server runs."""
        return {"backend": self.backend}

    @property
    def machine(self) -> ServerMachine | None:
        """The container the server runs in, for faults only a machine suffers (none: the
        embedded server runs as a plain process of this host)."""
        return None

    async def machine_summary(self) -> str | None:
        """What ``manage_instance status`` says of the server's machine (nothing here)."""
        return None

    async def dispose(self) -> None:
        """Release what the cluster holds besides its directory (nothing, here; a container
        cluster removes its containers)."""

    async def drop_standby(self) -> None:
        if self.standby is not None:
            await self.standby.stop(mode="immediate")
            shutil.rmtree(self.standby.root, ignore_errors=True)
            self.standby = None

    # -- the server's machine (OS-level faults; harness only) -------------------------------
    def edit_config(
        self, file: str, prepend: list[str], append: list[str], comment_out: str | None
    ) -> None:
        """Hand-edit ``postgresql.conf`` or ``pg_hba.conf`` in the data directory (the file
        keeps its owner and mode; the snapshot carries the edit)."""
        if file not in ("postgresql.conf", "pg_hba.conf"):
            raise ClusterError(f"edit_config: {file!r} is not a server configuration file")
        path = self.datadir / file
        lines = path.read_text().splitlines()
        if comment_out is not None:
            rx = re.compile(comment_out)
            lines = [f"#{ln}" if rx.search(ln) and not ln.lstrip().startswith("#") else ln
                     for ln in lines]  # fmt: skip
        marker = "# --- edited by hand ---"
        head = [marker, *prepend] if prepend else []
        tail = [marker, *append] if append else []
        path.write_text("\n".join([*head, *lines, *tail]) + "\n")

    def signal(self, pid: int, signal_name: str) -> None:
        """Send SIG<signal_name> to one of this server's processes."""
        if not self._is_server_process(pid):
            raise ClusterError(f"pid {pid} is not a process of this server")
        os.kill(pid, getattr(signal, f"SIG{signal_name}"))

    def _is_server_process(self, pid: int) -> bool:
        postmaster = self._postmaster_pid()
        return postmaster is not None and (
            pid == postmaster or _parent_pid(Path(f"/proc/{pid}/stat")) == postmaster
        )

    async def connect(
        self, user: str = "postgres", database: str = "postgres", application_name: str = "dbaops"
    ) -> asyncpg.Connection:
        return await asyncpg.connect(
            host=self.host,
            port=self.port,
            user=user,
            password=self.password(user),
            database=database,
            server_settings={"application_name": application_name},
            ssl=False,
        )

    # -- snapshots ------------------------------------------------------------------------
    async def capture_snapshot(self, name: str) -> float:
        """Stop the server (and its standby), copy the data directories to snapshot ``name``,
        start again. The primary stops first, so its shutdown checkpoint reaches the standby."""
        t0 = time.monotonic()
        await self.stop()
        if self.standby is not None:
            await self.standby.stop()
        self._seal_snapshots()
        target = self.snapshot_root / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        if not self._data_on_volume():
            await self._run("cp", "-a", str(self.datadir), str(target / "data"), as_service=False)
        if self.wal_dir is not None:
            await self._run("cp", "-a", str(self.wal_dir), str(target / "wal"), as_service=False)
        (target / "origin").write_text(str(self.root))
        await self._on_volumes(lambda: self.volumes.capture(target / "volumes"))
        if self.standby is not None:
            await self._run(
                "cp", "-a", str(self.standby.datadir), str(target / "standby"), as_service=False
            )
        (target / ".complete").touch()
        await self.start()
        if self.standby is not None:
            await self.standby.start()
        return time.monotonic() - t0

    async def restore_snapshot(self, name: str) -> float:
        """Replace the data directory with snapshot ``name`` and start; returns seconds."""
        if not self.has_snapshot(name):
            raise ClusterError(f"no snapshot {name!r} in {self.snapshot_root}")
        t0 = time.monotonic()
        await self.stop(mode="immediate")
        if self.standby is not None:
            await self.standby.stop(mode="immediate")
        self._clear_archive()
        origin = self._snapshot_origin(name)
        # Volumes first: the data directory may live on one.
        await self._on_volumes(lambda: self.volumes.restore(self.snapshot_root / name / "volumes"))
        if not self._data_on_volume():
            if self.datadir.exists():
                shutil.rmtree(self.datadir)
            await self._run("cp", "-a", str(self.snapshot_root / name / "data"),
                            str(self.datadir), as_service=False)  # fmt: skip
        if self.wal_dir is not None:
            shutil.rmtree(self.wal_dir, ignore_errors=True)
            await self._run("cp", "-a", str(self.snapshot_root / name / "wal"),
                            str(self.wal_dir), as_service=False)  # fmt: skip
        _rebase(self.datadir, origin, self.root)
        self.file_size_limit_bytes = None  # a run's faults end with it
        standby_copy = self.snapshot_root / name / "standby"
        if self.standby is not None and not standby_copy.exists():
            await self.drop_standby()  # a snapshot without a standby: none in this run
        if standby_copy.exists() and self.standby is None:
            # Known before the primary starts (a primary in a container listens for it on
            # the replication network), also in a cluster that restores a snapshot another
            # worker built.
            self.standby = self._standby_at(self.root / "standby")
        await self.start()
        if standby_copy.exists():
            assert self.standby is not None
            standby = self.standby
            if standby.datadir.exists():
                shutil.rmtree(standby.datadir)
            standby.socket_dir.mkdir(parents=True, exist_ok=True)
            await self._run("cp", "-a", str(standby_copy), str(standby.datadir), as_service=False)
            _rebase(standby.datadir, origin, self.root)
            if self.os_user:
                chown_tree(standby.root, self.os_user)
            self._point_standby_here()
            await standby.start()
        return time.monotonic() - t0

    def _snapshot_origin(self, name: str) -> Path:
        """The cluster directory a snapshot was captured from (another worker's, maybe)."""
        origin = self.snapshot_root / name / "origin"
        return Path(origin.read_text()) if origin.exists() else self.root

    def _clear_archive(self) -> None:
        # WAL segment names repeat after a restore or initdb; archived segments of an earlier
        # run would make `test ! -f` fail and the server's archiving with it.
        for segment in self.archive_dir.glob("*"):
            if segment.is_file():
                segment.unlink()


def _parent_pid(stat: Path) -> int | None:
    """The parent pid from ``/proc/<pid>/stat`` (None if the process is gone)."""
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _rebase(datadir: Path, origin: Path, root: Path) -> None:
    """Make a data directory captured in cluster ``origin`` belong to cluster ``root``: its
    configuration names the origin's socket and archive directories, its tablespace links
    the origin's volumes."""
    if origin == root:
        return
    old, new = str(origin), str(root)
    for conf in ("postgresql.conf", "postgresql.auto.conf"):
        path = datadir / conf
        if path.exists():
            text = path.read_text()
            if old in text:
                stat = path.stat()
                path.write_text(text.replace(old, new))
                os.chown(path, stat.st_uid, stat.st_gid)
    _relink(datadir / "pg_wal", old, new)  # WAL kept apart from the data directory
    links = datadir / "pg_tblspc"
    for link in links.iterdir() if links.exists() else []:
        _relink(link, old, new)


def _relink(link: Path, old: str, new: str) -> None:
    """Point symlink ``link`` from under ``old`` to the same place under ``new`` (its owner
    kept); anything else is left alone."""
    if not link.is_symlink():
        return
    target = os.readlink(link)
    if target.startswith(old + os.sep):
        stat = link.lstat()
        link.unlink()
        link.symlink_to(new + target[len(old) :])
        os.lchown(link, stat.st_uid, stat.st_gid)
