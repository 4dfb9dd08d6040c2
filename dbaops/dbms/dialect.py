"""What offline code needs to know of an engine, importable without its driver.

Scoring, reports, plots and the agent tools' descriptions ask an engine's
:class:`EngineDialect` (``engine_dialect("tidb")``), which each engine declares in its own
driver-free ``dbaops.dbms.<engine>.dialect`` module; nothing here imports a database driver,
so a recorded run can be scored and drawn where none is installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from dbaops.dbms.capabilities import EngineCapabilities
from dbaops.dbms.metric_spec import MetricSpec


@dataclass(frozen=True)
class ServerSeries:
    """One series of a run plot's server panel: a sampled metric, summed or maxed over its
    labels at each sample."""

    metric: str
    aggregation: str  # "sum" or "max"
    legend: str


@dataclass(frozen=True)
class EngineDialect:
    """An engine's offline face."""

    #: The name scenarios give in ``engine:``.
    name: str
    #: The SQL dialect of the safety judge's front end (``postgres``, ``mysql``).
    sql_dialect: str
    #: What the engine's metric sampler records, in a phrase (``query_metrics``' description).
    metrics_overview: str
    #: The run plot's server panel: the same two stories on every engine (sessions waiting on
    #: locks, the oldest open transaction), from the engine's own metrics.
    server_panel: tuple[ServerSeries, ...]
    #: The wall time (epoch seconds) and session (pid or connection id; 0: none) of a server
    #: log line, None for a line without the engine's stamp (a continuation).
    log_line_stamp: Callable[[str], tuple[float, int] | None]
    #: The stamp ``log_line_stamp`` reads, in words (for what the judge reports).
    log_prefix: str
    #: One SQL text as its statements (slices of the text), split as the engine's tokenizer
    #: does; None where the judge's front end splits with the engine's own parser.
    split_statements: Callable[[str], list[str]] | None
    #: A name as the engine's SQL quotes an identifier.
    quote_ident: Callable[[str], str]
    #: Why an SQL text does not parse in the engine's grammar, or None (scenario checking).
    sql_problem: Callable[[str], str | None]
    #: The canonical form of a scenario's SQL for its definition key (the business schema
    #: implicit, so SQL that only gains its qualifications means what it meant); None: as
    #: written.
    canonical_sql: Callable[[str], str] | None
    #: Text that marks a server log line as a crash of the server or of one of its processes.
    crash_markers: tuple[str, ...]
    #: Every metric the engine's sampler records, by name (scenarios' metric checks name them).
    metrics: Mapping[str, MetricSpec]
    #: The engine's standard observation surface: named read-only SQL probes (the survey).
    survey_probes: Mapping[str, str]
    #: The actions of the engine's ``manage_instance`` tool (scenario steps name them).
    instance_actions: tuple[str, ...]
    #: The engine's own checks of a scenario file: ``(scenario, library, parts)`` to messages
    #: naming the field (what it cannot run, what would cross its adversary boundary).
    scenario_problems: Callable[[Any, Any, Any], list[str]]
    #: The scenario features the engine supports (fault and check kinds, standby, ...).
    capabilities: EngineCapabilities
    #: The server's version as reports list it, from what the server says of itself.
    release: Callable[[str], str] = lambda version: version


#: The entry-point group engines register in: ``name = "package"``, where ``package`` has a
#: driver-free ``dialect`` module (``DIALECT``) and an ``engine`` module (``ENGINE``, the
#: :class:`~dbaops.dbms.interface.DatabaseEngine` class), so an engine can live outside dbaops.
ENTRY_POINT_GROUP = "dbaops.engines"

#: The engines dbaops ships, found even where its package metadata is missing (a source tree).
BUILT_IN_ENGINES = {"postgres": "dbaops.dbms.postgres", "tidb": "dbaops.dbms.tidb"}


@cache
def engine_packages() -> dict[str, str]:
    """Every registered engine's package by engine name: dbaops' own and those other
    distributions declare in the ``dbaops.engines`` entry-point group."""
    from importlib.metadata import entry_points

    packages = dict(BUILT_IN_ENGINES)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        packages.setdefault(point.name, point.value)
    return dict(sorted(packages.items()))


class UnknownDialect(ValueError):
    """A scenario or run named an engine dbaops has no dialect for."""


def registered_engine(name: str) -> str:
    """``name`` if an engine of that name is registered (a field validator's check)."""
    if name not in engine_packages():
        raise UnknownDialect(
            f"unknown database engine {name!r} (known: {', '.join(engine_packages())})"
        )
    return name


@cache
def engine_dialect(name: str) -> EngineDialect:
    """The offline face of engine ``name`` (its driver is not imported)."""
    packages = engine_packages()
    if name not in packages:
        raise UnknownDialect(f"unknown database engine {name!r} (known: {', '.join(packages)})")
    module = importlib.import_module(f"{packages[name]}.dialect")
    dialect = getattr(module, "DIALECT", None)
    if not isinstance(dialect, EngineDialect) or dialect.name != name:
        raise TypeError(f"{packages[name]}.dialect.DIALECT is not engine {name!r}'s dialect")
    return dialect


def survey_probes(engine: str) -> Mapping[str, str]:
    """The named standard probes of ``engine`` (empty for an engine dbaops has no dialect for)."""
    return engine_dialect(engine).survey_probes if engine in engine_packages() else {}
