"""What every embedded server's directory shares, whatever the engine: one run at a time (a
run lock), and a snapshot group (dirty snapshots shared by the servers of one group, root's
alone when the server runs as a service user, under a lock that is shared while restoring and
exclusive while building)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ClassVar

import anyio


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
