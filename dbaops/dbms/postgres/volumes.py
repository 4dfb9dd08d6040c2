"""Small loop-mounted filesystems for the embedded server (an OS-level fault: a real disk-full).

A volume is an ext4 image file ``<dir>/<name>.img`` mounted at ``<dir>/<name>``; the server's
OS user owns ``<dir>/<name>/data``, which a tablespace can use as its location. When it fills,
the server's writes there fail with ENOSPC ("could not extend file …: No space left on device",
SQLSTATE 53100) while the server itself, whose data directory and WAL live elsewhere, keeps
running. Mounting needs root and the loop driver, so only a root harness can make one.

Images are what snapshots carry: a capture copies each image while it is unmounted (the server
is stopped then), a restore puts the copies back and mounts them, so a restored run starts from
the very same blocks. The harness unmounts every volume when a run ends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from dbaops.dbms.osuser import chown_tree

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class VolumeError(RuntimeError):
    """A volume could not be made, mounted or unmounted."""


def volume_support_problem() -> str | None:
    """Why this process cannot make loop-mounted volumes (None: it can)."""
    if os.geteuid() != 0:
        return "a loop-mounted volume needs root (run dbaops as root)"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"a loop-mounted volume needs {tool} (Debian: e2fsprogs, mount)"
    if not Path("/dev/loop-control").exists():
        return "a loop-mounted volume needs the loop driver (/dev/loop-control is missing)"
    return None


def _run(*args: str) -> None:
    result = subprocess.run(list(args), capture_output=True, check=False)
    if result.returncode != 0:
        out = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise VolumeError(f"{' '.join(args)} failed ({result.returncode}): {out}")


class LoopVolumes:
    """The volumes of one cluster, under ``directory``."""

    def __init__(self, directory: Path, owner: str | None) -> None:
        self.directory = directory
        self.owner = owner

    def names(self) -> list[str]:
        """Volumes that exist (mounted or not)."""
        return sorted(p.stem for p in self.directory.glob("*.img"))

    def mount_point(self, name: str) -> Path:
        return self.directory / name

    def location(self, name: str) -> Path:
        """The directory on the volume the server's OS user owns (a tablespace location)."""
        return self.mount_point(name) / "data"

    def is_mounted(self, name: str) -> bool:
        target = str(self.mount_point(name).resolve())
        with open("/proc/self/mounts") as fh:
            return any(line.split()[1] == target for line in fh if len(line.split()) > 1)

    def device(self, name: str) -> str:
        """The loop device volume ``name`` is mounted from (it must be mounted)."""
        target = str(self.mount_point(name).resolve())
        with open("/proc/self/mounts") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 1 and fields[1] == target:
                    return fields[0]
        raise VolumeError(f"volume {name!r} is not mounted")

    def create(self, name: str, size_mb: int) -> Path:
        """A new, mounted, empty volume of ``size_mb`` MiB; returns its location."""
        if not _NAME.match(name):
            raise VolumeError(f"volume name {name!r} is not a lower-case identifier")
        problem = volume_support_problem()
        if problem is not None:
            raise VolumeError(problem)
        if name in self.names():
            raise VolumeError(f"volume {name!r} exists already")
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o755)
        image = self.directory / f"{name}.img"
        with image.open("wb") as fh:
            fh.truncate(size_mb * 1024 * 1024)
        # No reserved blocks: the server's user may fill it to the last block.
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-L", name[:16], str(image))
        self._mount(name)
        location = self.location(name)
        location.mkdir(mode=0o700)
        if self.owner:
            chown_tree(location, self.owner)
        return location

    def _mount(self, name: str) -> None:
        point = self.mount_point(name)
        point.mkdir(exist_ok=True)
        _run("mount", "-o", "loop,nodev,nosuid", str(self.directory / f"{name}.img"), str(point))

    def mount_all(self) -> None:
        for name in self.names():
            if not self.is_mounted(name):
                self._mount(name)

    def unmount_all(self) -> None:
        """Unmount every volume (the server must be stopped); images stay."""
        for name in self.names():
            if self.is_mounted(name):
                _run("umount", str(self.mount_point(name)))

    def remove_all(self) -> None:
        """Unmount and delete every volume."""
        self.unmount_all()
        for name in self.names():
            (self.directory / f"{name}.img").unlink()
            shutil.rmtree(self.mount_point(name), ignore_errors=True)

    def capture(self, target: Path) -> None:
        """Copy every image into ``target`` (unmounted while copied; remounted after)."""
        names = self.names()
        if not names:
            return
        self.unmount_all()
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            _run("cp", "--sparse=always", str(self.directory / f"{name}.img"), str(target))
        self.mount_all()

    def restore(self, source: Path) -> None:
        """Make the volumes exactly those captured in ``source`` (none if it has none)."""
        self.remove_all()
        images = sorted(source.glob("*.img")) if source.exists() else []
        if not images:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for image in images:
            _run("cp", "--sparse=always", str(image), str(self.directory))
        self.mount_all()


def unmount_under(path: Path, *, lazy: bool = False) -> None:
    """Unmount every filesystem mounted below ``path``, deepest first (``lazy``: even a busy
    one); what a killed run left mounted."""
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1] for line in fh if len(line.split()) > 1]
    for point in sorted(points, reverse=True):
        if point.startswith(f"{path}/"):
            args = ["umount", "-l", point] if lazy else ["umount", point]
            subprocess.run(args, check=False, capture_output=True)
