"""Atomic file replacement: the file holds either the old or the new content, never a mix."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_prefix(path: Path) -> str:
    """Prefix of the temporary files written next to ``path``."""
    return f".{path.name}."


def write_atomic(path: Path, data: str) -> None:
    """Replace ``path`` with ``data`` (UTF-8): temp file in the same directory, flush, fsync,
    ``os.replace``. Call :func:`fsync_dir` afterwards to make the rename itself durable.

    On failure before the rename ``path`` is untouched and the temp file is removed; a crash
    can leave a temp file behind (see :func:`remove_stale_temps`).
    """
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), 0o644)
            fh.write(data.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename in it survives a power loss (no-op where unsupported)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete temp files left next to ``path`` by a writer that crashed; returns them."""
    stale = [
        p
        for p in path.parent.glob(f"{temp_prefix(path)}*{TEMP_SUFFIX}")
        if p.is_file() and p != path
    ]
    for p in stale:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    return stale


def read_text(path: Path) -> str:
    """Read UTF-8 text without newline translation."""
    return path.read_bytes().decode("utf-8")
