"""Database engines by name: the one a scenario names in ``engine:``."""

from __future__ import annotations

from functools import cache

from dbaops.dbms.interface import DatabaseEngine


class UnknownEngine(ValueError):
    """A scenario or option named an engine dbaops does not have."""


def _engines() -> dict[str, type[DatabaseEngine]]:
    from dbaops.dbms.postgres.engine import PostgresEngine
    from dbaops.dbms.tidb.engine import TidbEngine

    return {PostgresEngine.name: PostgresEngine, TidbEngine.name: TidbEngine}


def engine_names() -> list[str]:
    """The registered engines' names."""
    return sorted(_engines())


@cache
def get_engine(name: str) -> DatabaseEngine:
    """The engine ``name`` (one object per process: engines hold no run state)."""
    engines = _engines()
    if name not in engines:
        raise UnknownEngine(f"unknown database engine {name!r} (known: {', '.join(engines)})")
    return engines[name]()
