"""What every embedded server's directory shares, whatever the engine: where it lives (the
dbaops home, a neutral name per server), free ports, the environment a server inherits, one
run at a time (a run lock), and a snapshot group (dirty snapshots shared by the servers of one
group, root's alone when the server runs as a service user, under a lock that is shared while
restoring and exclusive while building)."""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import secrets
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ClassVar

import anyio

from dbaops.dbms.osuser import running_as_root


def dbaops_home() -> Path:
    """Where clusters and caches live ($DBAOPS_HOME; /var/lib/dbaops as root)."""
    env = os.environ.get("DBAOPS_HOME")
    if env:
        return Path(env)
    if running_as_root():
        return Path("/var/lib/dbaops")
    return Path.home() / ".cache" / "dbaops"


#: The only environment the postmaster inherits: no API key or other harness variable.
SERVER_ENVIRONMENT: dict[str, str] = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}


def cluster_dir_name(name: str, home: Path) -> str:
    """A neutral directory name for the cluster of ``name`` (a scenario id): the server shows
    its data directory to the agent (``SHOW data_directory``), which must not name the
    scenario. Keyed by a per-home secret, so the name cannot be guessed from the id."""
    key = home_key(home)
    return "db-" + hmac.new(key, name.encode(), hashlib.sha256).hexdigest()[:12]


def home_key(home: Path) -> bytes:
    """The home's random key (made once, root's, mode 0600)."""
    secret_path = home / ".cluster-key"
    if not secret_path.exists():
        home.mkdir(parents=True, exist_ok=True)
        tmp = home / f".cluster-key.{os.getpid()}"
        tmp.write_bytes(secrets.token_bytes(32))
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, secret_path)  # first writer wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return secret_path.read_bytes()


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the postmaster does
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_paths(
    name: str, base: Path, flavor: str, snapshot_group: str | None, os_user: str | None
) -> tuple[Path, Path]:
    """The directory of cluster ``name`` under ``base`` and its snapshot group's, both named
    neutrally and suffixed by ``flavor`` (``pg15``, ``pg15-docker``: clusters of different
    servers never share a data directory or snapshots)."""
    root = base / "clusters" / f"{cluster_dir_name(name, base)}-{flavor}"
    root.mkdir(parents=True, exist_ok=True)
    if os_user:
        os.chmod(base, 0o755)
        os.chmod(base / "clusters", 0o755)
    group = f"{cluster_dir_name(snapshot_group or name, base)}-{flavor}"
    return root, base / "snapshots" / group


class ServerDirectory:
    """Mixin of an embedded server's directory (``root``) and its snapshot group
    (``snapshot_root``); ``os_user`` is the service user the server runs as (None: the
    harness's own user)."""

    root: Path
    os_user: str | None
    #: The error a busy directory raises (the engine's own).
    busy_error: ClassVar[type[Exception]] = RuntimeError
    _lock_fd: int | None = None

    @property
    def snapshot_root(self) -> Path:
        raise NotImplementedError

    def acquire(self) -> None:
        """Take the directory for one run; a second concurrent run gets a clear error."""
        fd = os.open(self.root / ".run.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self.busy_error(
                f"{self.root} is in use by another dbaops run (one run per scenario server "
                "at a time; set DBAOPS_HOME to run copies side by side)"
            ) from None
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def _seal_snapshots(self) -> None:
        """Snapshots belong to the harness: as root, the server's OS user cannot read them."""
        self.snapshot_root.mkdir(parents=True, exist_ok=True)
        if self.os_user:
            os.chown(self.snapshot_root, 0, 0)
            os.chmod(self.snapshot_root, 0o700)

    @asynccontextmanager
    async def snapshot_lock(self, *, exclusive: bool) -> AsyncIterator[None]:
        """Hold the snapshot group's lock: shared while restoring (several workers restore at
        once), exclusive while checking, building and capturing (one builds, the others wait,
        cancellably, and then restore what it captured)."""
        self._seal_snapshots()
        fd = os.open(self.snapshot_root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
            while True:
                try:
                    fcntl.flock(fd, mode)
                    break
                except BlockingIOError:
                    await anyio.sleep(0.2)
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the flock

    def has_snapshot(self, name: str) -> bool:
        return (self.snapshot_root / name / ".complete").exists()

    def drop_snapshot(self, name: str) -> None:
        shutil.rmtree(self.snapshot_root / name, ignore_errors=True)
