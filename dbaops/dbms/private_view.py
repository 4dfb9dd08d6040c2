"""The embedded server's private view of the filesystem: a mount namespace of its own.

A superuser agent (``agent.elevated``) or any escalation to the server's OS user can run
programs and read files as that user (``COPY … FROM PROGRAM``, ``pg_read_file``). File modes
alone do not keep it away from the harness: a checkout, a run directory and a scenario library
are world-readable. So when dbaops runs as root, the postmaster starts in a private mount
namespace in which

- every top-level directory but the operating system's programs, libraries and settings
  (``/root``, ``/home``, ``/tmp``, ``/var``, ``/opt``, a ``/work``…) and the harness's own
  places (``DBAOPS_HOME``, the checkout, the working directory) are covered by empty memory
  filesystems;
- only the cluster's own directory (data, sockets, archive, volumes) and the server's binaries
  are mounted back at their usual paths;
- ``/proc`` shows the server's OS user its own processes only (``hidepid=2``): no harness
  command line, working directory or open file;
- the server runs as its OS user with no supplementary groups and ``no_new_privs`` (a setuid
  program it starts gains nothing).

Mounts the harness makes on the host after the server started (a tablespace volume) are not
seen inside; :func:`mount_inside` adds them there too. The namespace ends with the server's
last process.
"""

from __future__ import annotations

import functools
import os
import pwd
import subprocess
import tempfile
from pathlib import Path

import structlog

import dbaops

log = structlog.get_logger(__name__)

#: Top-level directories of the operating system: the server needs them and they hold nothing
#: of the harness. Every other top-level directory is hidden.
SYSTEM_DIRECTORIES = frozenset(
    {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run", "sbin", "sys", "usr"}
)  # fmt: skip

#: Hidden directories are empty memory filesystems of this size (the server may write to its
#: own /tmp; it must not fill the machine's memory through it).
HIDDEN_SIZE = "256m"

_SCRIPT = r"""
set -euo pipefail
stage=$1; uid=$2; gid=$3; size=$4; shift 4
keep=(); while [ "$1" != -- ]; do keep+=("$1"); shift; done; shift
hide=(); while [ "$1" != -- ]; do hide+=("$1"); shift; done; shift
mount -t tmpfs -o mode=700,size=1m dbaops-stage "$stage"
for i in "${!keep[@]}"; do mkdir "$stage/$i"; mount --rbind "${keep[$i]}" "$stage/$i"; done
for h in "${hide[@]}"; do
  mount -t tmpfs -o "mode=755,size=$size,nosuid,nodev" dbaops-hidden "$h"
done
for i in "${!keep[@]}"; do mkdir -p "${keep[$i]}"; mount --move "$stage/$i" "${keep[$i]}"; done
umount "$stage"
mount -t proc -o hidepid=2,nosuid,nodev,noexec proc /proc
exec env -u SHLVL -u _ setpriv --reuid="$uid" --regid="$gid" --clear-groups --no-new-privs -- "$@"
"""


def hidden_directories(harness_places: list[Path], root: Path = Path("/")) -> list[Path]:
    """What the server must not see: every non-system top-level directory and the harness's
    places, without those inside another hidden one (one covering hides them)."""
    candidates = [
        entry
        for entry in sorted(root.iterdir())
        if entry.name not in SYSTEM_DIRECTORIES and entry.is_dir() and not entry.is_symlink()
    ]
    system = {(root / name).resolve() for name in SYSTEM_DIRECTORIES}
    candidates += [
        p.resolve()
        for p in harness_places
        if p.exists() and p.is_dir() and p.resolve() not in system  # a cwd of /usr, say
    ]
    unique = sorted({c.resolve() for c in candidates}, key=lambda p: (len(p.parts), str(p)))
    hidden: list[Path] = []
    for path in unique:
        if path == root.resolve() or any(path.is_relative_to(h) for h in hidden):
            continue
        hidden.append(path)
    return hidden


def private_view_command(
    command: list[str], user: str, keep: list[Path], harness_places: list[Path]
) -> list[str]:
    """``command`` wrapped to run as ``user`` in a new mount namespace that shows only
    ``keep`` of the harness's filesystem (run as root)."""
    entry = pwd.getpwnam(user)
    kept = sorted({p.resolve() for p in keep}, key=lambda p: len(p.parts))
    kept = [k for k in kept if not any(k != o and k.is_relative_to(o) for o in kept)]
    hide = hidden_directories(harness_places)
    stage = Path(tempfile.mkdtemp(prefix="dbaops-stage-", dir="/run"))
    return [
        "unshare", "--mount", "--propagation", "slave", "--",
        "bash", "-c", _SCRIPT, "dbaops-server",
        str(stage), str(entry.pw_uid), str(entry.pw_gid), HIDDEN_SIZE,
        *map(str, kept), "--", *map(str, hide), "--", *command,
    ]  # fmt: skip


def namespace_support_problem() -> str | None:
    """Why this process cannot give the server a private view (None: it can)."""
    if os.geteuid() != 0:
        return "a private mount namespace needs root"
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "slave", "--", "true"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unshare is not usable: {exc}"
    if result.returncode != 0:
        return "unshare --mount failed: " + result.stderr.decode(errors="replace").strip()
    return None


def mount_inside(pid: int, source: str, target: Path, options: str) -> None:
    """Mount ``source`` at ``target`` in the mount namespace of process ``pid`` too (a mount
    the harness made on the host after the server started)."""
    result = subprocess.run(
        ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "mount", "-o", options, source,
         str(target)],
        capture_output=True,
        check=False,
    )  # fmt: skip
    if result.returncode != 0:
        out = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise OSError(f"mounting {source} at {target} for the server failed: {out}")


def shares_host_view(pid: int) -> bool:
    """True if process ``pid`` sees the host's mounts (it runs in our mount namespace)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return True


@functools.cache
def private_views_work() -> bool:
    """Whether a server can get a private view here (checked once per process; without one
    the server's OS user can read what file modes let it, and dbaops says so once)."""
    problem = namespace_support_problem()
    if problem is not None:
        log.warning("server_without_private_view", reason=problem)
    return problem is None


def harness_places(home: Path) -> list[Path]:
    """Where the harness keeps what a server must not read, beyond the non-system top-level
    directories: its home (every cluster and snapshot), the checkout, the working directory
    and the user's home."""
    return [home, Path(dbaops.__file__).resolve().parents[1], Path.cwd(), Path.home()]


def remove_stage(command: list[str]) -> None:
    """Remove the (empty) staging directory a private view was assembled in."""
    for arg in command:
        if arg.startswith("/run/dbaops-stage-"):
            try:
                os.rmdir(arg)
            except OSError:
                pass
