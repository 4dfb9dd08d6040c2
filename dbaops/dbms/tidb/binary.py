"""Finding a ``tidb-server`` executable: the one a user names, dbaops' own build, one on PATH,
or one tiup installed."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from dbaops.dbms.tidb.build import cached_build

#: Names the ``tidb-server`` to use.
TIDB_SERVER_ENV = "DBAOPS_TIDB_SERVER"


class TidbServerNotFound(RuntimeError):
    """No ``tidb-server`` executable was found."""


@dataclass(frozen=True)
class TidbBinary:
    """A ``tidb-server`` executable and where it was found."""

    path: Path
    source: str  # "$DBAOPS_TIDB_SERVER", "dbaops build", "PATH", "tiup"


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def tiup_servers(home: Path | None = None) -> list[Path]:
    """The ``tidb-server`` executables tiup installed (``tiup install tidb:vX``), newest first."""
    base = Path(os.environ.get("TIUP_HOME") or (home or Path.home()) / ".tiup")
    found = [p for p in base.glob("components/tidb/*/tidb-server") if os.access(p, os.X_OK)]
    return sorted(found, key=lambda p: _version_key(p.parent.name), reverse=True)


def find_tidb_server() -> TidbBinary:
    """``$DBAOPS_TIDB_SERVER``, else the build of ``dbaops tidb build``, else ``tidb-server`` on
    PATH, else the newest tiup installed; a clear error naming the ways to get one otherwise."""
    named = os.environ.get(TIDB_SERVER_ENV)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise TidbServerNotFound(f"{TIDB_SERVER_ENV}={named} is not an executable file")
        return TidbBinary(path, f"${TIDB_SERVER_ENV}")
    build = cached_build()
    if build is not None:
        return TidbBinary(build.binary, "dbaops build")
    on_path = shutil.which("tidb-server")
    if on_path:
        return TidbBinary(Path(on_path), "PATH")
    installed = tiup_servers()
    if installed:
        return TidbBinary(installed[0], "tiup")
    raise TidbServerNotFound(
        "no tidb-server found. Get one in any of these ways:\n"
        "  - `dbaops tidb build` builds it from the Go module proxy with your Go toolchain "
        "(>= 1.23.6; 10-15 minutes on 2 cores);\n"
        "  - put a `tidb-server` on PATH;\n"
        f"  - name one in ${TIDB_SERVER_ENV};\n"
        "  - `tiup install tidb:v8.5.0` (tiup's components are found under ~/.tiup)."
    )
