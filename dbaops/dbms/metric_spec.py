"""What a sampled metric is, for every engine: its name, kind, unit and label key.

Each engine declares the metrics its sampler records (PostgreSQL's in
:mod:`dbaops.dbms.postgres.metrics`, TiDB's in :mod:`dbaops.dbms.tidb.metrics`) and gives them
through its dialect (``EngineDialect.metrics``), against which scenarios' metric checks are
validated. Three kinds:

``counter``
    Cumulative since server start or stats reset (``db.xact_commit``); stored as the raw value.
    Rates are computed at query time; a decrease is treated as a reset.
``gauge``
    A level at the sample instant (``activity.count``, ``table.n_dead_tup``), or a rate the
    sampler already computed (TiDB's ``tidb.queries_per_s``).
``delta``
    Increment since the previous successful sample, already differenced by the sampler
    (``statements.*``, kept only for the top-N queries of each sample).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "gauge", "delta"]


@dataclass(frozen=True)
class MetricSpec:
    """One registered metric; ``label`` names the label key(s) ("" when unlabelled)."""

    name: str
    kind: MetricKind
    unit: str
    description: str
    label: str = ""


#: The sampler's own health, recorded on every engine.
SAMPLER_METRICS = (
    MetricSpec(
        "sampler.up", "gauge", "bool", "1 for a successful sample, 0 for a failed attempt (a gap)"
    ),
    MetricSpec("sampler.duration_ms", "gauge", "ms", "Wall time of the sample round trip"),
)
