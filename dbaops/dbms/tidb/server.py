"""The embedded TiDB server: one ``tidb-server`` (the SQL layer with its embedded unistore
storage) on loopback ports, with its own directory, logs and snapshots.

Layout of a server's directory (named neutrally, as PostgreSQL clusters are)::

    store/          unistore's data (what a snapshot copies)
    log/tidb.log    the server log;  log/tidb-slow.log  the slow query log
    tmp/            temp-dir and spill files
    run/            the working directory (oom_record/)
    tidb.toml       the configuration the server starts with

As root, the server runs as dbaops' service user (as PostgreSQL does) and the snapshots are
root's alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio

from dbaops.dbms.errors import InstanceError
from dbaops.dbms.osuser import (
    as_user,
    chown_tree,
    ensure_service_user,
    readable_by_others,
    running_as_root,
)
from dbaops.dbms.private_view import (
    harness_places,
    private_view_command,
    private_views_work,
    remove_stage,
)
from dbaops.dbms.serverdir import (
    SERVER_ENVIRONMENT,
    ServerDirectory,
    cluster_paths,
    dbaops_home,
    port_is_free,
)
from dbaops.dbms.tidb.agent_role import HARNESS_PRIVILEGES, sem_config_lines
from dbaops.dbms.tidb.binary import TidbBinary, find_tidb_server
from dbaops.dbms.tidb.endpoint import (
    CONNECTION_ERRORS,
    TidbEndpoint,
    execute,
    fetch_all,
    fetch_value,
)

#: How long a start may take before it is an error (the first start bootstraps the system
#: tables: about 3 s here, much longer on a loaded machine).
START_TIMEOUT_S = 180.0
#: How long a clean stop may take before the server is killed.
STOP_TIMEOUT_S = 30.0


#: ``[performance] txn-total-size-limit``, deliberately not TiDB's default (100 MiB). With the
#: default, the pinned TiDB tracks a transaction's write buffer in the session's memory tracker,
#: and a ``KILL`` of a session holding buffered writes panics the whole server while it rolls
#: back (``memory.Tracker.Consume`` re-raises the kill signal outside any recover; found here
#: when an agent killed an idle transaction's lock holder). Any other value turns that tracking
#: off (``session.SetMemoryFootprintChangeHook``); transactions may then buffer up to 256 MiB.
TXN_TOTAL_SIZE_LIMIT = 256 * 1024 * 1024


class TidbError(InstanceError):
    """The embedded TiDB server could not be created, started, stopped or restored."""


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def binary_version(binary: Path) -> str:
    """The release version ``tidb-server -V`` prints (``v9.0.0-master.20251126``)."""
    done = subprocess.run([str(binary), "-V"], capture_output=True, text=True, timeout=60)
    for line in done.stdout.splitlines():
        if line.startswith("Release Version:"):
            return line.split(":", 1)[1].strip()
    raise TidbError(f"{binary} -V printed no release version: {done.stdout or done.stderr}")


def _accessible_binary(binary: Path, os_user: str | None) -> Path:
    """``binary``, or a copy the service user can execute (a build under /root is not)."""
    if os_user is None or readable_by_others(binary):
        return binary
    st = binary.stat()
    target = dbaops_home() / "bin" / f"tidb-server-{st.st_size}-{st.st_mtime_ns}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(target.parent, 0o755)
        # one partial copy per caller: the workers of a campaign on a fresh home copy at
        # once, and the last rename wins (each copy is the same binary)
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            shutil.copy2(binary, partial)
            os.chmod(partial, 0o755)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


class TidbServer(ServerDirectory):
    """One embedded ``tidb-server`` with its directory and snapshot group."""

    #: Where the server runs (the run header's ``backend.kind``).
    backend: ClassVar[str] = "embedded"
    busy_error: ClassVar[type[Exception]] = TidbError
    #: The embedded server has no standby (the runner asks every engine's instance).
    standby: ClassVar[None] = None

    def __init__(
        self,
        root: Path,
        binary: TidbBinary,
        version: str,
        os_user: str | None,
        snapshot_root: Path,
    ) -> None:
        self.root = root
        self.binary = binary
        self.version = version
        self.os_user = os_user
        self._snapshot_root = snapshot_root
        self.host = "127.0.0.1"
        self.port, self.status_port = _two_free_ports()
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    async def open(
        cls,
        name: str,
        binary: TidbBinary | None = None,
        snapshot_group: str | None = None,
    ) -> TidbServer:
        """The embedded server of ``name`` (not started): its directory is created on first
        use, under ``$DBAOPS_HOME``; servers of different TiDB versions never share one."""
        found = binary or find_tidb_server()
        version = await anyio.to_thread.run_sync(binary_version, found.path)
        os_user = ensure_service_user() if running_as_root() else None
        flavor = "tidb-" + version.lstrip("v")
        root, snapshots = cluster_paths(name, dbaops_home(), flavor, snapshot_group, os_user)
        executable = await anyio.to_thread.run_sync(_accessible_binary, found.path, os_user)
        return cls(root, TidbBinary(executable, found.source), version, os_user, snapshots)

    def acquire(self) -> None:
        """Take the directory for this run, then stop a server a crashed harness left running
        on it (only once the directory is ours: another live run's server is not a
        leftover)."""
        super().acquire()
        self._kill_leftover()

    # -- paths ----------------------------------------------------------------------------
    @property
    def snapshot_root(self) -> Path:
        """The snapshot group's directory (shared by the campaign workers of a scenario)."""
        return self._snapshot_root

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    @property
    def log_path(self) -> Path:
        return self.root / "log" / "tidb.log"

    @property
    def slow_log_path(self) -> Path:
        return self.root / "log" / "tidb-slow.log"

    @property
    def config_path(self) -> Path:
        return self.root / "tidb.toml"

    @property
    def _pid_path(self) -> Path:
        return self.root / "tidb.pid"

    def endpoint(self, database: str | None = None) -> TidbEndpoint:
        """The harness's endpoint (as ``root``, which has no password on loopback)."""
        return TidbEndpoint(
            host=self.host, port=self.port, database=database, status_port=self.status_port
        )

    def describe(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "binary": str(self.binary.path),
            "binary_source": self.binary.source,
            "release_version": self.version,
            "root": str(self.root),
            "status_port": self.status_port,
        }

    # -- lifecycle ------------------------------------------------------------------------
    def _write_config(self, *, sem: bool = True) -> None:
        tmp = self.root / "tmp"
        lines = [
            f"temp-dir = {_toml_string(str(tmp))}",
            f"tmp-storage-path = {_toml_string(str(tmp / 'storage'))}",
            'socket = ""',  # loopback TCP only (the default is a socket in /tmp)
            "[log]",
            'level = "info"',
            f"slow-query-file = {_toml_string(str(self.slow_log_path))}",
            "[log.file]",
            f"filename = {_toml_string(str(self.log_path))}",
            "[performance]",
            f"txn-total-size-limit = {TXN_TOTAL_SIZE_LIMIT}",
            *(sem_config_lines() if sem else []),
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _prepare_dirs(self, *, sem: bool = True) -> None:
        for sub in ("store", "log", "tmp", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._write_config(sem=sem)
        if self.os_user:
            chown_tree(self.root, self.os_user)
        self._seal_snapshots()  # the harness's, out of the server user's reach

    def _command(self) -> list[str]:
        return [
            str(self.binary.path),
            f"--config={self.config_path}",
            "--store=unistore",
            f"--path={self.store_dir}",
            f"--host={self.host}",
            f"-P={self.port}",
            f"--status-host={self.host}",
            f"--status={self.status_port}",
        ]

    def _spawn(self) -> subprocess.Popen[bytes]:
        """The server process: as root, in a private view of the filesystem
        (:mod:`dbaops.dbms.private_view`; the wrapper ``exec``s into tidb-server, so
        the process is the server's)."""
        command, user = self._command(), as_user(self.os_user)
        if self.os_user is not None and private_views_work():
            keep = [self.root, self.binary.path.parent]
            places = [*harness_places(dbaops_home()), self.root.parents[1]]
            command, user = private_view_command(command, self.os_user, keep, places), {}
        with open(self.root / "log" / "stderr.log", "ab") as stderr:
            return subprocess.Popen(
                command,
                cwd=self.root / "run",
                env=SERVER_ENVIRONMENT,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                **user,
                start_new_session=True,  # a Ctrl-C of the harness is the harness's to handle
            )

    def process_alive(self) -> bool:
        """Whether the server process this object started is alive."""
        return self._proc is not None and self._proc.poll() is None

    async def is_running(self) -> bool:
        """Whether the server runs (the runner asks every engine's instance this way)."""
        return self.process_alive()

    async def machine_summary(self) -> str | None:
        """No machine limits are set on the embedded TiDB."""
        return None

    def resume_stopped(self) -> None:
        """Nothing to resume: no fault stops the TiDB process (the runner's teardown asks)."""

    async def reinitialize(self) -> None:
        """Start over from an empty store (the harness's privileges granted again)."""
        await self.stop()
        if self.store_dir.exists():
            await anyio.to_thread.run_sync(shutil.rmtree, self.store_dir)
        await self.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.process_alive() and self._proc is not None else None

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the server (in Security Enhanced Mode) and wait until it answers SQL; an error
        with the log's tail when it exits or does not answer in time. A store whose ``root``
        lacks the RESTRICTED_* privileges (a new one: SEM takes them from SUPER) is first
        started once without SEM to grant them, so the harness keeps its reach."""
        if self.process_alive():
            return
        await self._start(timeout_s, sem=True)
        if not await self._harness_privileged():
            await self.stop()
            await self._start(timeout_s, sem=False)
            conn = await self.connect()
            try:
                await execute(conn, f"GRANT {', '.join(HARNESS_PRIVILEGES)} ON *.* TO 'root'@'%'")
            finally:
                conn.close()
            await self.stop()
            await self._start(timeout_s, sem=True)

    async def _harness_privileged(self) -> bool:
        conn = await self.connect()
        try:
            grants = " ".join(str(r) for r in await fetch_all(conn, "SHOW GRANTS"))
        finally:
            conn.close()
        return all(p in grants for p in HARNESS_PRIVILEGES)

    async def _start(self, timeout_s: float, *, sem: bool) -> None:
        self._prepare_dirs(sem=sem)
        if not (port_is_free(self.port) and port_is_free(self.status_port)):
            self.port, self.status_port = _two_free_ports()
        self._proc = self._spawn()
        self._pid_path.write_text(str(self._proc.pid))
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise TidbError(f"tidb-server exited ({code}) while starting:\n{self.log_tail()}")
            if await self._answers():
                remove_stage(list(map(str, self._proc.args)))  # type: ignore[arg-type]
                return
            if time.monotonic() > deadline:
                await self.stop()
                raise TidbError(f"tidb-server did not answer in {timeout_s:.0f} s:\n"
                                f"{self.log_tail()}")  # fmt: skip
            await anyio.sleep(0.25)

    async def _answers(self) -> bool:
        try:
            conn = await self.endpoint().raw_connect(connect_timeout_s=2.0)
        except CONNECTION_ERRORS:
            return False
        try:
            return await fetch_value(conn, "SELECT 1") == 1
        except CONNECTION_ERRORS:
            return False
        finally:
            conn.close()

    async def stop(self, mode: str = "fast", timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the server: SIGTERM (a clean shutdown), SIGKILL after ``timeout_s``; mode
        ``immediate`` (PostgreSQL's word for a stop without shutdown) kills it at once."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if mode == "immediate" and proc.poll() is None:
            proc.kill()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await anyio.to_thread.run_sync(functools.partial(proc.wait, timeout_s))
            except subprocess.TimeoutExpired:
                proc.kill()
                await anyio.to_thread.run_sync(proc.wait)
        self._pid_path.unlink(missing_ok=True)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def kill(self) -> None:
        """SIGKILL the server (a crash); the next start recovers from the store."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _kill_leftover(self) -> None:
        """A server a crashed harness left running on this directory is stopped."""
        try:
            pid = int(self._pid_path.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if str(self.config_path).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not process_gone(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        self._pid_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = 20) -> str:
        out: list[str] = []
        for path in (self.root / "log" / "stderr.log", self.log_path):
            if path.exists():
                out += path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(out)

    async def connect(self, database: str | None = None) -> Any:
        """A harness connection (``root``)."""
        return await self.endpoint(database).raw_connect()

    async def server_version(self) -> str:
        conn = await self.connect()
        try:
            return str(await fetch_value(conn, "SELECT VERSION()"))
        finally:
            conn.close()

    # -- snapshots ------------------------------------------------------------------------
    async def capture_snapshot(self, name: str) -> float:
        """Stop the server cleanly, copy its store to snapshot ``name``, start again."""
        t0 = time.monotonic()
        await self.stop()
        self._seal_snapshots()
        target = self.snapshot_root / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        await anyio.run_process(["cp", "-a", str(self.store_dir), str(target / "store")])
        (target / ".complete").touch()
        await self.start()
        return time.monotonic() - t0

    async def restore_snapshot(self, name: str) -> float:
        """Replace the store with snapshot ``name`` and start; returns seconds."""
        if not self.has_snapshot(name):
            raise TidbError(f"no snapshot {name!r} in {self.snapshot_root}")
        t0 = time.monotonic()
        await self.stop()
        if self.store_dir.exists():
            shutil.rmtree(self.store_dir)
        source = self.snapshot_root / name / "store"
        await anyio.run_process(["cp", "-a", str(source), str(self.store_dir)])
        await self.start()
        return time.monotonic() - t0

    async def dispose(self) -> None:
        """Stop the server and release the directory."""
        try:
            await self.stop()
        finally:
            self.release()


def _two_free_ports() -> tuple[int, int]:
    """Two distinct free loopback ports (SQL, status), both held while choosing."""
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        return int(a.getsockname()[1]), int(b.getsockname()[1])


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (reaped, or a zombie its parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True
