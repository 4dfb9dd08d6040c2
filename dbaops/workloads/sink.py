"""Collects SLO samples on the hot path and streams them to Parquet parts in batches."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Protocol

import anyio
import polars as pl

from dbaops.record.tables import SAMPLE_SCHEMA, ParquetParts, read_parts
from dbaops.workloads.ledger import DriverLedger
from dbaops.workloads.samples import Outcome

_COLUMNS = list(SAMPLE_SCHEMA)

SampleRow = tuple[
    str,
    str,
    str,
    float,
    float | None,
    float,
    float,
    int,
    str,
    str | None,
    str | None,
    bool | None,
    float | None,
]


class SampleSource(Protocol):
    """Where a sink's rows come from when the drivers run elsewhere (their own process)."""

    async def sync(self) -> None:
        """Return once every row and ledger change made before the call is in the sink."""


class RowWatcher(Protocol):
    """Sees every row the sink receives (the client-lag monitor)."""

    def observe(self, rows: Iterable[SampleRow]) -> None: ...


#: Scenario seconds of finished samples kept in memory by default (a run keeps at least its
#: longest workload check's window: ``Scenario.longest_workload_window_s``).
RECENT_WINDOW_S = 120.0


class SampleSink:
    """Buffer of sample rows; ``flush`` writes one Parquet part; keeps a recent window in memory.

    Rows are plain tuples in :data:`SAMPLE_SCHEMA` column order: building a pydantic model per
    transaction would cost more than the transaction on a busy client. ``ledger`` counts what
    the clients committed (see :mod:`dbaops.workloads.ledger`).
    """

    def __init__(
        self, parts: ParquetParts | None, recent_s: float | None = RECENT_WINDOW_S
    ) -> None:
        self._parts = parts
        self._pending: list[SampleRow] = []
        self._recent: deque[SampleRow] = deque()
        self._recent_s = recent_s
        self._lock = threading.Lock()
        self._inflight: dict[object, tuple[str, float, float, float]] = {}
        self.total = 0
        self.ledger = DriverLedger()
        self.tokens = itertools.count()  # in-flight keys, unique across the sink's drivers
        self._source: SampleSource | None = None
        self._watcher: RowWatcher | None = None

    def attach(self, source: SampleSource) -> None:
        """Rows arrive from ``source`` (see :meth:`extend`); :meth:`refresh` syncs with it."""
        self._source = source

    def watch(self, watcher: RowWatcher) -> None:
        """``watcher`` sees every row from now on, wherever the drivers run."""
        self._watcher = watcher

    async def refresh(self) -> None:
        """Make the sink current before reading it for a check (a no-op for drivers in this
        process, whose rows are added as they finish)."""
        if self._source is not None:
            await self._source.sync()

    def add(
        self,
        workload: str,
        kind: str,
        unit: str,
        scheduled_s: float,
        start_s: float | None,
        end_s: float,
        latency_ms: float,
        retries: int,
        outcome: Outcome,
        sqlstate: str | None = None,
        error: str | None = None,
        correct: bool | None = None,
        client_lag_ms: float | None = None,
    ) -> None:
        row: SampleRow = (
            workload,
            kind,
            unit,
            scheduled_s,
            start_s,
            end_s,
            latency_ms,
            retries,
            outcome.value,
            sqlstate,
            error,
            correct,
            client_lag_ms,
        )
        self.extend((row,))

    def extend(self, rows: Sequence[SampleRow]) -> None:
        """Finished rows, in the order they ended (one from a driver here, or a batch
        relayed from a driver process)."""
        self._pending.extend(rows)
        self.total += len(rows)
        if self._watcher is not None:
            self._watcher.observe(rows)
        if self._recent_s is None or not rows:
            return
        recent = self._recent
        recent.extend(rows)
        horizon = rows[-1][5] - self._recent_s
        while recent and recent[0][5] < horizon:
            recent.popleft()

    def take(self) -> list[SampleRow]:
        """The rows added since the last take (for relaying them to another process)."""
        rows, self._pending = self._pending, []
        return rows

    def in_flight(self) -> dict[object, tuple[str, float, float, float]]:
        """The units in flight: key -> (workload, scheduled_s, deadline_s, start monotonic)."""
        return dict(self._inflight)

    def replace_in_flight(self, units: dict[object, tuple[str, float, float, float]]) -> None:
        self._inflight = units

    def started(self, workload: str, token: object, scheduled_s: float, deadline_s: float,
                scheduled_mono: float) -> None:  # fmt: skip
        """A unit is in flight (so a stalled one counts as a miss before it finishes)."""
        self._inflight[token] = (workload, scheduled_s, deadline_s, scheduled_mono)

    def finished(self, token: object) -> None:
        self._inflight.pop(token, None)

    def recent(self, since_s: float, now: tuple[float, float] | None = None) -> pl.DataFrame:
        """Finished samples *scheduled* at or after scenario time ``since_s`` (from the in-memory
        window): a window after a fix sees the fixed system, not the backlog that was queued
        before it and drained into the window (whose share would depend on ``--time-scale``).

        With ``now = (scenario time, monotonic time)``, units still in flight past their
        deadline are included as ``late`` rows with their latency so far: a stalled server must
        show up in live statistics before its stuck transactions end.
        """
        rows = [r for r in self._recent if r[3] >= since_s]
        if now is not None:
            now_s, now_mono = now
            for workload, sched_s, deadline_s, sched_mono in list(self._inflight.values()):
                if deadline_s < now_s and sched_s >= since_s:
                    rows.append((workload, "oltp", "(in flight)", sched_s, None, now_s,
                                 (now_mono - sched_mono) * 1000.0, 0, Outcome.LATE.value,
                                 None, "in flight past its deadline", None,
                                 None))  # fmt: skip
        return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")

    def scheduled_between(self, since_s: float, until_s: float) -> pl.DataFrame:
        """Finished samples scheduled in ``[since_s, until_s)``, however long ago: from the
        recorded parts plus rows not yet flushed (without parts, the in-memory window only).
        For baselines measured over an earlier part of the run."""
        if self._parts is None:
            rows = list(self._recent)
            recorded = pl.DataFrame(schema=SAMPLE_SCHEMA)
        else:
            rows = list(self._pending)
            recorded = read_parts(self._parts.directory, self._parts.final, SAMPLE_SCHEMA)
        frame = pl.concat(
            [recorded.select(_COLUMNS).cast(SAMPLE_SCHEMA),  # type: ignore[arg-type]
             pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")],
            how="vertical",
        )  # fmt: skip
        return frame.filter(pl.col("scheduled_s").is_between(since_s, until_s, closed="left"))

    def frame(self) -> pl.DataFrame:
        """Every finished sample of the run so far (recorded parts plus unflushed rows)."""
        return self.scheduled_between(float("-inf"), float("inf"))

    def flush(self) -> int:
        rows, self._pending = self._pending, []
        if rows and self._parts is not None:
            self._parts.append(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"))
        return len(rows)

    async def run_flusher(self, every_s: float = 1.0) -> None:
        """Flush periodically until cancelled, then flush once more."""
        try:
            while True:
                await anyio.sleep(every_s)
                self.flush()
        finally:
            self.flush()


#: The error a driver records for a unit the client gave up on (its timeout passed).
CLIENT_TIMEOUT = "client_timeout"
#: The error a driver records for a unit whose every attempt outlived the attempt timeout.
CLIENT_ATTEMPT_TIMEOUT = "client_attempt_timeout"


def _client_gave_up(frame: pl.DataFrame) -> pl.Series:
    """Units that ended because the client stopped waiting (its timeout, or every attempt's),
    not because the server answered with an error."""
    return frame["error"].fill_null("").is_in([CLIENT_TIMEOUT, CLIENT_ATTEMPT_TIMEOUT])


def _latency_percentile(frame: pl.DataFrame, stat: str) -> float | None:
    """The ``p50_ms``/``p95_ms``/``p99_ms`` of ``frame``'s latencies (None: no unit)."""
    if frame.height == 0:
        return None
    q = {"p50_ms": 0.5, "p95_ms": 0.95, "p99_ms": 0.99}[stat]
    value = frame["latency_ms"].quantile(q, interpolation="linear")
    return None if value is None else float(value)  # type: ignore[arg-type]


def censored_latency_stat(frame: pl.DataFrame, stat: str) -> float | None:
    """A latency percentile over completed units **and** units the client gave up on, each
    of those at the time it waited: a lower bound of the true percentile (the system was at
    least that slow). A broken baseline whose every unit timed out has one, where
    :func:`workload_stat` has none."""
    return _latency_percentile(
        frame.filter(frame["outcome"].is_in(["on_time", "late"]) | _client_gave_up(frame)), stat
    )


def workload_stat(frame: pl.DataFrame, stat: str, sqlstate: str | None = None) -> float | None:
    """A summary statistic of samples (for workload checks and the live view).

    ``sqlstate_ratio`` is the share of units whose error SQLSTATE starts with ``sqlstate`` (a
    full code, or a two-character class such as ``40``)."""
    if frame.height == 0:
        return 0.0 if stat == "count" else None
    if stat == "count":
        return float(frame.height)
    if stat in ("p50_ms", "p95_ms", "p99_ms"):
        # Latency percentiles are over completed units only: an error or a dropped unit has
        # no service latency (they are error_ratio and drop_ratio).
        return _latency_percentile(frame.filter(frame["outcome"].is_in(["on_time", "late"])), stat)
    outcomes = frame["outcome"]
    if stat == "drop_ratio":
        return float((outcomes == "dropped").mean())  # type: ignore[arg-type]
    if stat == "on_time_ratio":
        return float((outcomes == "on_time").mean())  # type: ignore[arg-type]
    if stat == "error_ratio":
        return float((outcomes == "error").mean())  # type: ignore[arg-type]
    if stat == "server_error_ratio":
        return float(((outcomes == "error") & ~_client_gave_up(frame)).mean())  # type: ignore[arg-type]
    if stat == "miss_ratio":
        return float((outcomes != "on_time").mean())  # type: ignore[arg-type]
    if stat == "sqlstate_ratio":
        if not sqlstate:
            raise ValueError("sqlstate_ratio needs the SQLSTATE to count")
        matched = frame["sqlstate"].fill_null("").str.starts_with(sqlstate)
        return float(matched.mean())  # type: ignore[arg-type]
    raise ValueError(f"unknown workload statistic {stat!r}")
