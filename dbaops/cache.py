"""dbaops' cache directory: what can be rebuilt but is worth keeping between runs (the
knowledge-base index, the built ``tidb-server``), shared by every ``DBAOPS_HOME``."""

from __future__ import annotations

import os
from pathlib import Path

#: Overrides the cache's location.
CACHE_ENV = "DBAOPS_CACHE"


def cache_dir(kind: str) -> Path:
    """``$DBAOPS_CACHE/<kind>``, else ``$XDG_CACHE_HOME/dbaops/<kind>``, else
    ``~/.cache/dbaops/<kind>``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / kind
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dbaops" / kind
