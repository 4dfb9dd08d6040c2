"""Metric kinds for the run's queries, over every engine's declared metrics (each engine's
dialect gives them: PostgreSQL's in :mod:`dbaops.dbms.postgres.metrics`, TiDB's in
:mod:`dbaops.dbms.tidb.metrics`; kinds in :mod:`dbaops.dbms.metric_spec`)."""

from __future__ import annotations

import polars as pl

from dbaops.dbms.dialect import engine_dialect, engine_packages
from dbaops.dbms.metric_spec import MetricKind, MetricSpec

#: Every metric any engine declares (names are engine-prefixed; ``sampler.*`` is the same on
#: all): the metric queries' default registry, where no engine's dialect is given.
ALL_METRICS: dict[str, MetricSpec] = {
    name: spec for e in engine_packages() for name, spec in engine_dialect(e).metrics.items()
}
_KINDS: dict[str, MetricKind] = {name: spec.kind for name, spec in ALL_METRICS.items()}


def metric_kind(name: str) -> MetricKind:
    """Kind of a metric; names no engine declares are treated as gauges."""
    return _KINDS.get(name, "gauge")


def metric_kind_expr(column: str = "metric") -> pl.Expr:
    """The kind of the metric named in ``column``, as a polars expression (names outside the
    registry are gauges)."""
    return pl.col(column).replace_strict(_KINDS, default="gauge", return_dtype=pl.String)


#: Metrics the judge reads that the agent's ``query_metrics`` does not show: what the verdict
#: measures about the agent itself.
JUDGE_ONLY_METRICS = frozenset({"locks.blocked_by_agent"})
