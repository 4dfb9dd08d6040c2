"""Database engines by name: the one a scenario names in ``engine:``. Engines register by
package (:func:`dbaops.dbms.dialect.engine_packages`: dbaops' own and those declared in the
``dbaops.engines`` entry-point group); a package's ``engine`` module gives ``ENGINE``."""

from __future__ import annotations

import importlib
from functools import cache

from dbaops.dbms.dialect import engine_packages
from dbaops.dbms.interface import DatabaseEngine


class UnknownEngine(ValueError):
    """A scenario or option named an engine dbaops does not have."""


def engine_names() -> list[str]:
    """The registered engines' names."""
    return list(engine_packages())


@cache
def get_engine(name: str) -> DatabaseEngine:
    """The engine ``name`` (one object per process: engines hold no run state)."""
    packages = engine_packages()
    if name not in packages:
        raise UnknownEngine(f"unknown database engine {name!r} (known: {', '.join(packages)})")
    module = importlib.import_module(f"{packages[name]}.engine")
    engine = getattr(module, "ENGINE", None)
    if not (isinstance(engine, type) and issubclass(engine, DatabaseEngine)) or (
        engine.name != name
    ):
        raise TypeError(f"{packages[name]}.engine.ENGINE is not engine {name!r}'s class")
    return engine()
