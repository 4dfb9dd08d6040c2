"""SLO samples: one row per finished, failed or dropped unit of workload."""

from __future__ import annotations

from enum import StrEnum

import polars as pl
from pydantic import BaseModel

from dbaops.record.tables import SAMPLE_SCHEMA


class Outcome(StrEnum):
    """How a unit of work ended relative to its deadline."""

    ON_TIME = "on_time"
    LATE = "late"
    ERROR = "error"
    DROPPED = "dropped"


class SLOSample(BaseModel):
    """One transaction, job or background unit.

    Times ``*_s`` are scenario seconds; ``latency_ms`` is wall milliseconds from the
    *scheduled* start to the end, so queueing for a connection, lock waits and retries count.
    What the client itself was late by (``client_lag_ms``: its event loop started the unit
    after its scheduled time) is not the server's and is left out: ``latency_ms`` and the
    deadline count from ``scheduled_s`` plus the lag.
    """

    workload: str
    kind: str  # "oltp" | "olap" | "background"
    unit: str  # transaction template or job name
    scheduled_s: float
    start_s: float | None
    end_s: float
    latency_ms: float
    retries: int = 0
    outcome: Outcome
    sqlstate: str | None = None
    error: str | None = None
    correct: bool | None = None  # OLAP result check; None where not applicable
    client_lag_ms: float | None = None  # the client's own lateness at the unit's start


def samples_frame(samples: list[SLOSample]) -> pl.DataFrame:
    """Build a frame with the canonical schema (also for an empty list)."""
    rows = [s.model_dump(mode="json") for s in samples]
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row" if not rows else None)
